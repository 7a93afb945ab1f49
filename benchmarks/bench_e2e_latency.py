"""End-to-end latency of a record through a seglog -> seglog streaming query: from the
producer's ``append_many`` until a reader of the output topic sees it (issue 25's
baseline), on a local dir and on a bucket behind the 25 ms proxy, beside the floor of a
no-op Python source and sink in the same Spark session.

Run: ``python benchmarks/bench_e2e_latency.py [--duration-s 60] [--interval-ms 100]
[--delay-ms 25] [--storage local bucket noop] [--server auto|seaweedfs|moto] [--quick]
[--no-recommended] [--conf KEY=VALUE ...]`` (``--quick``: ``--duration-s 15``). The
session gets docs/operations.md's recommended settings
(``seglog.datasource.LOW_LATENCY_SPARK_CONF``, printed), so the figures are what a user
following the docs gets; ``--no-recommended`` measures Spark's defaults instead;
``--conf``: more Spark settings of the session (after those), to measure them.

Per storage, one query from topic ``in`` of one log dir to topic ``out`` of another
(two log dirs: on a local dir the producer holds its log dir's lock; the bucket does the
same for a like comparison); format ``seglog`` both sides, exactly-once sink,
``processingTime`` 0 (the next micro-batch starts as soon as the last ended), in a
``local[2]`` session. A producer thread appends one record every ``--interval-ms``
(``append_many``, the record's value its wall-clock time in ns); a reader thread tails
``out`` (``high_watermarks``, then ``read_chunks``; every 5 ms) and takes for each record
its latency = the time it saw it - the time in its value. Records produced before 3 s
after the query's first micro-batch with rows ended (its start-up) are left out. On
the bucket the reader's look is one LIST at ``--delay-ms``: up to one more round trip is
in each figure, as for any consumer.

The floor (``noop``): a Python data source whose offsets are lines of a local file the
producer appends to (one line per record, its time in ns) and a Python sink whose
driver-side ``commit`` takes each record's latency: Spark's own cost of planning,
launching and committing a micro-batch, with no storage at all.

Printed: p50/p90/p99 latency and, from the query's progress events (micro-batches that
had rows; means): the producer's publish (``append_many`` call time), and Spark's
``latestOffset`` + ``queryPlanning`` + ``getBatch`` (trigger planning), ``walCommit``,
``addBatch``, ``commitOffsets``, and ``triggerExecution`` (all of it). ``addBatch`` is
split with the step times the source's read, the sink's write and its commit append to
``SEGLOG_TRACE_FILE`` (``seglog.streaming.step_trace``; the floor's source and sink trace
the same steps), joined by batch id: *launch* (from ``addBatch``'s start, taken as the
commit's end minus ``addBatch``, to the first read: the write's planning and the task's
start), *read* (the source's ``read`` until its last row), *write* (the sink's ``write``
after the last row was read), *to commit* (the last write's end to the commit's start on
the driver: the task's end and the commit worker's start) and *commit* (the sink's
``commit``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "tests"))
# The no-op data source (noop_latency_source.py): Spark's Python workers import it by module.
sys.path.insert(0, str(_HERE))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(_HERE), os.environ.get("PYTHONPATH", "")) if p
)

import pyarrow as pa  # noqa: E402
from noop_latency_source import NoopLatencySource  # noqa: E402
from query_cpu import CpuSampler, Window, progress_window  # noqa: E402
from s3_proxy import S3Proxy  # noqa: E402
from s3_server import MotoServer, SeaweedServer, seaweed_unavailable  # noqa: E402

from seglog.datasource.spark_conf import LOW_LATENCY_SPARK_CONF  # noqa: E402
from seglog.logstore.manager.log_manager import LogManager  # noqa: E402
from seglog.logstore.records.record_codec import decode_batches, encode_batches  # noqa: E402
from seglog.streaming.step_trace import TRACE_ENV, StepTime, read_trace  # noqa: E402

WARMUP_S = 3.0
FIRST_BATCH_TIMEOUT_S = 600.0
POLL_S = 0.005
PROGRESS_KEYS = (
    "latestOffset",
    "queryPlanning",
    "getBatch",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


# -- producer and reader ---------------------------------------------------------------


class Warm:
    """When measuring starts (wall clock, ns): ``WARMUP_S`` after the query's first
    micro-batch with rows ended (its start-up and its tasks' first use of the codec
    kernels, tens of seconds on a loaded machine, are no latency of a running query);
    records produced before are left out."""

    def __init__(self) -> None:
        self.ns = 2**63 - 1
        self.first_batch = -1

    def wait_for(self, query: Any) -> None:
        deadline = time.monotonic() + FIRST_BATCH_TIMEOUT_S
        while not (with_rows := [p for p in query.recentProgress if p["numInputRows"] > 0]):
            if query.exception() is not None:
                raise RuntimeError(f"the query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"no micro-batch with rows ended within {FIRST_BATCH_TIMEOUT_S} s"
                )
            time.sleep(0.2)
        self.first_batch = with_rows[0]["batchId"]
        time.sleep(WARMUP_S)
        self.ns = time.time_ns()


@dataclass
class Case:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    publish_ms: list[float] = field(default_factory=list)
    progress: list[dict[str, Any]] = field(default_factory=list)  # after the first
    steps: list[StepTime] = field(default_factory=list)  # traced while the query ran
    cpu: Window | None = None  # over the micro-batches of ``progress``


def _produce(
    append: Callable[[int], None],
    case: Case,
    stop: threading.Event,
    interval_s: float,
    warm: Warm,
) -> None:
    next_at = time.monotonic()
    while not stop.is_set():
        t0 = time.monotonic()
        ns = time.time_ns()
        append(ns)
        if ns >= warm.ns:
            case.publish_ms.append((time.monotonic() - t0) * 1000)
        next_at += interval_s
        stop.wait(max(0.0, next_at - time.monotonic()))


def _tail(mgr: LogManager, case: Case, stop: threading.Event, warm: Warm) -> None:
    pos = 0
    while not stop.is_set():
        hw = mgr.high_watermarks().get(("out", 0), 0)
        if hw > pos:
            for chunk in mgr.get_log("out", 0).read_chunks(pos, hw):
                now = time.time_ns()
                for value in decode_batches(chunk, start_offset=pos).column("value").to_pylist():
                    produced = int(value)
                    if produced >= warm.ns:
                        case.latencies_ms.append((now - produced) / 1e6)
            pos = hw
        stop.wait(POLL_S)


def _record(ns: int) -> bytearray:
    return encode_batches(pa.array([b"%d" % ns]), None, pa.array([ns // 1_000_000], pa.int64()))


def run_seglog(
    spark: Any, case: Case, in_dir: str, out_dir: str, chk: str, args: argparse.Namespace
) -> None:
    for log_dir, topic in ((in_dir, "in"), (out_dir, "out")):
        with LogManager(log_dir) as mgr:
            mgr.create_topic(topic, 1, {"retention.ms": -1})
    writer = LogManager(in_dir)
    reader = LogManager(out_dir, read_only=True)
    stop = threading.Event()
    warm = Warm()
    query = (
        spark.readStream.format("seglog")
        .option("path", in_dir)
        .option("subscribe", "in")
        .load()
        .writeStream.format("seglog")
        .option("path", out_dir)
        .option("topic", "out")
        .option("checkpointLocation", chk)
        .trigger(processingTime="0 seconds")
        .start()
    )
    threads = [
        threading.Thread(
            target=_produce,
            args=(
                lambda ns: writer.append_many({("in", 0): _record(ns)}),
                case,
                stop,
                args.interval_ms / 1000,
                warm,
            ),
        ),
        threading.Thread(target=_tail, args=(reader, case, stop, warm)),
    ]
    traced_from = _trace_size()
    try:
        for t in threads:
            t.start()
        warm.wait_for(query)
        time.sleep(args.duration_s)
    finally:
        stop.set()
        for t in threads:
            t.join()
        case.progress = _measured(query, warm)
        query.stop()
        case.steps = _traced_since(traced_from)
        writer.close()
        reader.close()


def run_noop(spark: Any, case: Case, work: Path, args: argparse.Namespace) -> None:
    times, lats = work / "produced.txt", work / "latencies.txt"
    times.write_bytes(b"")
    lats.write_bytes(b"")
    stop = threading.Event()
    warm = Warm()

    def append(ns: int) -> None:
        with open(times, "ab") as f:
            f.write(b"%d\n" % ns)

    query = (
        spark.readStream.format("noop_latency_bench")
        .option("path", str(times))
        .load()
        .writeStream.format("noop_latency_bench")
        .option("latencies", str(lats))
        .option("checkpointLocation", str(work / "chk-noop"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    producer = threading.Thread(
        target=_produce, args=(append, case, stop, args.interval_ms / 1000, warm)
    )
    traced_from = _trace_size()
    try:
        producer.start()
        warm.wait_for(query)
        time.sleep(args.duration_s)
    finally:
        stop.set()
        producer.join()
        case.progress = _measured(query, warm)
        query.stop()
        case.steps = _traced_since(traced_from)
    pairs = [line.split() for line in lats.read_text().splitlines()]
    case.latencies_ms = [int(lat) / 1e6 for produced, lat in pairs if int(produced) >= warm.ns]


def _trace_size() -> int:
    path = Path(os.environ[TRACE_ENV])
    return path.stat().st_size if path.exists() else 0


def _traced_since(offset: int) -> list[StepTime]:
    """The steps the query traced (its cases run one after the other in one session)."""
    path = os.environ[TRACE_ENV]
    return read_trace(path, offset) if Path(path).exists() else []


def _measured(query: Any, warm: Warm) -> list[dict[str, Any]]:
    """The progress of the micro-batches after the first that had rows."""
    return [
        p for p in query.recentProgress if p["numInputRows"] > 0 and p["batchId"] > warm.first_batch
    ]


def _pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def report(case: Case) -> None:
    if len(case.latencies_ms) < 2:
        print(
            f"  {case.name}: fewer than 2 records seen "
            f"({len(case.progress)} micro-batches with rows after the first)"
        )
        return
    lat = case.latencies_ms
    print(
        f"  {case.name:>20}: {len(lat)} records, latency p50 {_pct(lat, 50):6.0f} ms  "
        f"p90 {_pct(lat, 90):6.0f} ms  p99 {_pct(lat, 99):6.0f} ms"
    )
    parts = [f"publish {statistics.mean(case.publish_ms):.0f}"] if case.publish_ms else []
    for key in PROGRESS_KEYS:
        values = [p["durationMs"].get(key, 0) for p in case.progress]
        if values:
            parts.append(f"{key} {statistics.mean(values):.0f}")
    rows = [p["numInputRows"] for p in case.progress]
    print(
        f"  {'':>20}  ms means over {len(rows)} micro-batches with rows "
        f"({statistics.mean(rows) if rows else 0:.1f} rows each): " + ", ".join(parts)
    )
    if case.cpu is not None and case.progress:
        n = len(case.progress)
        print(
            f"  {'':>20}  CPU ms per micro-batch: {case.cpu.client_s * 1000 / n:.0f} this "
            f"query's processes (Spark's JVM and Python workers; this process's producer and "
            f"reader), {case.cpu.others_s * 1000 / n:.0f} the machine's other work"
        )
    split = split_add_batch(case.progress, case.steps)
    if split:
        n = split.pop("micro-batches")
        print(
            f"  {'':>20}  addBatch split (ms means over {n:.0f} traced micro-batches): "
            + ", ".join(f"{k} {v:.0f}" for k, v in split.items())
        )
    else:
        print(f"  {'':>20}  addBatch split: no micro-batch traced its read, write and commit")


SPLIT_KEYS = ("launch", "read", "write", "to commit", "commit", "addBatch")


def split_add_batch(progress: list[dict[str, Any]], steps: list[StepTime]) -> dict[str, float]:
    """Means over the micro-batches of ``progress`` whose read, write and commit were
    traced: ``SPLIT_KEYS`` (ms) and ``micro-batches`` (how many); empty when none was."""
    by_batch: dict[int, list[StepTime]] = {}
    for s in steps:
        if s.batch is not None:
            by_batch.setdefault(s.batch, []).append(s)
    rows: list[dict[str, float]] = []
    for p in progress:
        mine = by_batch.get(p["batchId"], [])
        reads = [s for s in mine if s.step == "read"]
        writes = [s for s in mine if s.step == "write"]
        commits = [s for s in mine if s.step == "commit"]
        if not (reads and writes and len(commits) == 1):
            continue
        commit = commits[0]
        add_batch_ms = float(p["durationMs"].get("addBatch", 0))
        # addBatch ends when the commit returns to Spark: its start, from the commit's end.
        start = commit.end_ns - add_batch_ms * 1e6
        read_start = min(s.start_ns for s in reads)
        read_end = max(s.end_ns for s in reads)
        write_end = max(s.end_ns for s in writes)
        rows.append(
            {
                "launch": (read_start - start) / 1e6,
                "read": (read_end - read_start) / 1e6,
                "write": max(0, write_end - read_end) / 1e6,
                "to commit": (commit.start_ns - write_end) / 1e6,
                "commit": commit.ms,
                "addBatch": add_batch_ms,
            }
        )
    if not rows:
        return {}
    out = {k: statistics.mean(r[k] for r in rows) for k in SPLIT_KEYS}
    out["micro-batches"] = float(len(rows))
    return out


def _conf(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise SystemExit(f"--conf {item!r}: expected KEY=VALUE")
    return key.strip(), value.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--interval-ms", type=float, default=100.0)
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument(
        "--storage",
        nargs="*",
        default=["noop", "local", "bucket"],
        choices=("noop", "local", "bucket"),
    )
    parser.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    parser.add_argument("--quick", action="store_true", help="--duration-s 15")
    parser.add_argument(
        "--no-recommended",
        action="store_true",
        help="Spark's defaults instead of docs/operations.md's recommended settings",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting of the session (repeatable)",
    )
    args = parser.parse_args()
    recommended = [] if args.no_recommended else list(LOW_LATENCY_SPARK_CONF.items())
    confs = [_conf(item) for item in args.conf]
    if args.quick:
        args.duration_s = 15.0

    from pyspark.sql import SparkSession

    from seglog.datasource import SeglogDataSource

    use_seaweed = args.server == "seaweedfs" or (
        args.server == "auto" and seaweed_unavailable() is None
    )
    server: MotoServer | SeaweedServer = SeaweedServer() if use_seaweed else MotoServer()
    with (
        tempfile.TemporaryDirectory() as tmp,
        server,
        S3Proxy(server.endpoint, delay_s=args.delay_ms / 1000) as proxy,
    ):
        # Before the session: Spark's Python workers inherit the environment.
        os.environ.update({**server.env, "AWS_ENDPOINT_URL": proxy.endpoint})
        work = Path(tmp)
        os.environ[TRACE_ENV] = str(work / "steps.jsonl")
        builder = (
            SparkSession.builder.master("local[2]")
            .appName("bench-e2e-latency")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
        )
        for key, value in recommended + confs:
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.dataSource.register(SeglogDataSource)
        spark.dataSource.register(NoopLatencySource)
        print(
            f"local[2]; one record every {args.interval_ms:.0f} ms for {args.duration_s:.0f} s "
            f"from {WARMUP_S:.0f} s after the first micro-batch; bucket: "
            f"{'SeaweedFS' if use_seaweed else 'moto'}, "
            f"{args.delay_ms:.0f} ms per request; load {os.getloadavg()[0]:.1f}\n"
            + (
                "  recommended settings (docs/operations.md): "
                + "; ".join(f"{k}={v}" for k, v in recommended)
                if recommended
                else "  Spark's defaults (--no-recommended)"
            )
            + "".join(f"; {k}={v}" for k, v in confs),
            flush=True,
        )
        try:
            # Over the measured micro-batches: the query's own CPU, apart from others'.
            with CpuSampler(server.pid, period_s=0.5) as sampler:
                for storage in args.storage:
                    case = Case(storage)
                    if storage == "noop":
                        case.name = "no-op Python floor"
                        run_noop(spark, case, work, args)
                    elif storage == "local":
                        case.name = "seglog local dir"
                        for d in ("in", "out"):
                            (work / d).mkdir()
                        run_seglog(
                            spark,
                            case,
                            str(work / "in"),
                            str(work / "out"),
                            str(work / "chk-local"),
                            args,
                        )
                    else:
                        case.name = "seglog bucket"
                        bucket = server.create_bucket("e2e")
                        run_seglog(
                            spark,
                            case,
                            f"s3://{bucket}/in",
                            f"s3://{bucket}/out",
                            str(work / "chk-bucket"),
                            args,
                        )
                    case.cpu = sum(
                        (sampler.window(*progress_window(p)) for p in case.progress),
                        Window(0.0, 0.0, 0.0, 0.0),
                    )
                    report(case)
            print(f"  (load {os.getloadavg()[0]:.1f} at the end)")
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
