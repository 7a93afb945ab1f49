"""Spark on a bucket: sink and source rows/s against the no-op Python Arrow ceilings and
against seglog on a local dir, and the driver's commit time per micro-batch.

    python benchmarks/bench_spark_bucket.py [--rows 3000000] [--per-batch 500000]
        [--repeats 5] [--commit-mb 1,100,1000] [--history 10,1000] [--skip-spark]
        [--skip-commit] [--phases] [--only sink|source] [--server seaweedfs|moto]
        [--sinks noop,local,default,merge,peer] [--delay-ms 0]

The default sink against its PUT peer, with enough rounds to trust the ratio:

    python benchmarks/bench_spark_bucket.py --only sink --skip-commit \
        --sinks default,peer --repeats 7

The bucket is an S3 server on 127.0.0.1 (``tests/s3_server.py``), started before the
session so every Python worker inherits its ``AWS_*`` environment: SeaweedFS (Go, a
storage server run in production) where its wheel installs, else moto (one Python
process, several times SeaweedFS's CPU per request). Either shares the machine's two
cores with Spark, which S3 would not: the bucket's rows/s here are a floor.

1. Sink: one input (a local seglog topic read by the seglog source), AvailableNow
   queries per round, alternating: the no-op Python Arrow writer, seglog on a local dir,
   seglog on the bucket (by default, which merges small fragments after the commit when
   enough lie side by side, and with ``mergeSmallSegments=true``, which also merges in
   task 0 of every micro-batch, the default before 2026-11-27). The input is the same
   for all, so its cost is in each.
   A fourth, the peer (``bucket_peers.put_arrow``), only PUTs each task's rows into a
   bucket as one Arrow IPC object: what moving the rows into this store costs at all.
   ``--sinks`` picks the cases; each round runs them back to back, in an order rotated
   by one each round. Per query, over its steady micro-batches (``query_cpu``): the CPU
   seconds of Spark's processes (client), of the S3 server and of everyone else on the
   machine, the CPU ceiling (its rows over its and the server's core-seconds spread on
   the cores), the mean ms of each micro-batch phase, and what bound it. At the end,
   each case's rows/s over the PUT peer's of the same round: the per-round ratios, their
   median and range. ``--delay-ms`` puts ``tests/s3_proxy.py`` in front of the server
   (every request that much later) and adds each query's round trips in sequence a
   micro-batch (at most: ``query_cpu``) and its latency ceiling (rows a micro-batch over
   those round trips).
2. Source: the same rows in a local dir and in the bucket, read by the seglog source into
   Spark's ``noop`` sink, alternating with the no-op Python Arrow reader and with the
   peer (``bucket_peers.get_arrow``), whose tasks GET the same rows from the same bucket
   as Arrow IPC objects (written in the set-up, untimed) and yield them.
   Each query's steady-state rate is sum(numInputRows) / sum(triggerExecution) over every
   micro-batch but its first (the ~13 s query start-up is left out). Per case: the best
   round (interference only ever slows a run down) and the median; ratios of the bests.
3. Driver commit per micro-batch, Spark-free: two tasks stage and upload their fragments
   (``sink_bucket_staging.stage_rows``, what a write task runs, 64 MB fragments) for 1 MB,
   100 MB and 1 GB micro-batches; the objects are listed in the bucket before the commit;
   only ``sink_bucket_commit.commit()`` (the driver's whole commit) is timed. Then a 1 MB
   micro-batch's commit with 10 and with 1,000 commits already in the bucket's history.
4. ``--phases``: where a write task's time goes, Spark-free, on the functions the task
   calls (route and encode, validate, index, upload), for the local dir and the bucket.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
sys.path.insert(0, str(_HERE.parent / "tests"))
# The no-op data sources live in the peer benchmarks: Spark's workers import them too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(_HERE), os.environ.get("PYTHONPATH", "")) if p
)

from bench_spark_sink import fill_input, noop_source  # noqa: E402
from bench_spark_source import NoopDataSource, run, write_seglog  # noqa: E402
from bucket_peers import (  # noqa: E402
    get_arrow_source,
    put_arrow_source,
    put_get_peer_objects,
)
from bucket_spark_free import commit_by_history, commit_by_size, load, phases  # noqa: E402
from query_cpu import (  # noqa: E402
    CpuSampler,
    Window,
    bound,
    phase_means,
    progress_window,
)
from s3_proxy import S3Proxy, sequential_round_trips  # noqa: E402
from s3_server import MotoServer, S3Server, SeaweedServer, seaweed_unavailable  # noqa: E402

GET_PEER_OBJECT_ROWS = 100_000
IN_TASK_MERGE = "seglog bucket, mergeSmallSegments=true"
SINK_CASES = {
    "noop": "no-op Python Arrow writer",
    "local": "seglog local dir",
    "default": "seglog bucket",
    "merge": IN_TASK_MERGE,
    "peer": "Arrow IPC PUT to the bucket",
}
"""``--sinks`` names for the sink cases."""
CORES = os.cpu_count() or 1


def server_cpu_s(server: S3Server) -> float:
    """CPU seconds the S3 server has used so far (user + system, from /proc): the store's
    work shares this machine's two cores with Spark, which a real store's would not."""
    fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def requests_since(server: S3Server, before: Counter[str]) -> tuple[str, Counter[str]]:
    """The requests the server served since the counts ``before``, by kind, and the
    counts now."""
    now = server.request_counts()
    kinds = now - before
    return f"{sum(kinds.values())} requests (" + ", ".join(
        f"{k} {n}" for k, n in sorted(kinds.items())
    ) + ")", now


# ---------------------------------------------------------------------- Spark rates
@dataclass
class SinkRun:
    """One sink query: its steady-state rate and its steady micro-batches' progress."""

    rate: float
    steady: list[dict]


def sink_rate(
    spark,
    source: str,
    target: str,
    out: Path,
    per_batch: int,
    options: Mapping[str, str] | None = None,
) -> SinkRun:
    df = (
        spark.readStream.format("seglog")
        .option("path", source)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_batch))
        .load()
        .select("key", "value")
    )
    w = df.writeStream.option("checkpointLocation", str(out / f"chk-{time.time_ns()}"))
    if target == "noop":
        w = w.format("noop_arrow")
    elif target.startswith("put:"):
        w = w.format("put_arrow").option("bucket", target[len("put:") :])
    else:
        w = (
            w.format("seglog")
            .option("path", target)
            .option("topic", f"out{time.time_ns()}")
            .option("numPartitions", "3")
            .options(**(options or {}))
        )
    q = w.trigger(availableNow=True).start()
    q.awaitTermination()
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    steady = progress[1:] or progress
    rate = sum(p["numInputRows"] for p in steady) / (
        sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
    )
    return SinkRun(rate, steady)


def print_rates(title: str, rates: dict[str, list[float]], ceiling: str, peer: str) -> None:
    """Each case's best and median, then the bucket's best against the no-op ``ceiling``,
    against the local log dir and against the plain-Arrow ``peer`` on the same bucket (all
    measured in the same run; a ratio whose case did not run is left out)."""
    print(title)
    for label, runs in rates.items():
        print(
            f"  {label:30s} best {max(runs):12,.0f}  median {statistics.median(runs):12,.0f}"
            f"  ({', '.join(f'{r:,.0f}' for r in runs)})"
        )
    best = {label: max(runs) for label, runs in rates.items()}
    med = {label: statistics.median(runs) for label, runs in rates.items()}
    for name, v in (("best", best), ("median", med)):
        against = [
            (f"/ {other}", v[other]) for other in (ceiling, "seglog local dir", peer) if other in v
        ]
        for case in (label for label in rates if label not in (ceiling, peer)):
            ratios = ", ".join(
                f"{what} {v[case] / rate:.2f}" for what, rate in against if not what.endswith(case)
            )
            print(f"  {name:6s} {case}: {ratios}")


def print_round_ratios(
    rates: dict[str, list[float]], spent: dict[str, list[Window]], peer: str
) -> None:
    """Each case's rows/s over the ``peer``'s in the same round (the cases of a round
    run back to back, so a load that lasts a round weighs on both), their median and
    range, and the CPU each case cost per million rows (median of the rounds)."""
    if peer not in rates:
        return
    print(f"per-round ratios to {peer} (median; range):")
    for case, runs in rates.items():
        if case == peer:
            continue
        ratios = [a / b for a, b in zip(runs, rates[peer], strict=True)]
        print(
            f"  {case:38s} {statistics.median(ratios):.2f}; {min(ratios):.2f}-"
            f"{max(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)})"
        )
    print(
        "core-s per million steady rows (median of the rounds): client / S3 server / "
        "others on the machine:"
    )
    cost: dict[str, list[float]] = {}  # each round's client + server core-s a row
    for case, windows in spent.items():
        rows = [rate * w.wall_s / 1e6 for rate, w in zip(rates[case], windows, strict=True)]
        per = [
            (w.client_s / m, w.server_s / m, w.others_s / m)
            for w, m in zip(windows, rows, strict=True)
            if m
        ]
        if per:
            c, sv, o = (statistics.median(x) for x in zip(*per, strict=True))
            print(f"  {case:38s} {c:5.2f} / {sv:5.2f} / {o:5.2f}")
            cost[case] = [client + server for client, server, _ in per]
    # Where the cores are the bound, a case's rate is its CPU ceiling's share of them:
    # the ratio of the ceilings is what the rates' ratio tends to on a quiet machine,
    # and others' work, which slows both cases of a round alike, moves it less.
    if peer in cost and all(len(c) == len(cost[peer]) for c in cost.values()):
        print(f"per-round ratios of CPU ceilings to {peer}'s (median; range):")
        for case, own in cost.items():
            if case != peer:
                ratios = [p / c for p, c in zip(cost[peer], own, strict=True)]
                print(
                    f"  {case:38s} {statistics.median(ratios):.2f}; {min(ratios):.2f}-"
                    f"{max(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)})"
                )


def steady_round_trips(proxy: S3Proxy, since: float, windows: list[tuple[float, float]]) -> float:
    """Sequential round trips the steady micro-batches waited for, in all (the proxy's
    log, its clock mapped to the wall clock)."""
    offset = time.time() - proxy.clock()
    made = proxy.requests(since)
    return sum(
        sequential_round_trips(r for r in made if a <= r.arrived + offset < b) for a, b in windows
    )


def spark_rates(
    server: S3Server, work: Path, args: argparse.Namespace, proxy: S3Proxy | None
) -> None:
    from pyspark.sql import SparkSession

    from seglog.datasource import SeglogDataSource

    bucket = server.create_bucket("bench")
    uri = f"s3://{bucket}/logs"
    local_in = work / "in-logs"
    t = time.perf_counter()
    fill_input(local_in, args.rows)
    peer_objects = 0
    if args.only != "sink":
        write_seglog(str(work / "src-logs"), args.rows)
        write_seglog(uri, args.rows)
        # The GET peer's objects: the same rows, decoded once by seglog, as many rows per
        # object as write_seglog appends at a time (each append is one segment object).
        peer_objects = put_get_peer_objects(
            bucket, str(work / "src-logs"), "bench", args.rows // 2, GET_PEER_OBJECT_ROWS
        )
    print(
        f"data: {args.rows:,} rows in the sink's input, in each source's log dir and in "
        f"{peer_objects} Arrow IPC objects for the GET peer "
        f"({time.perf_counter() - t:.0f} s)",
        flush=True,
    )
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SeglogDataSource)
    spark.dataSource.register(noop_source())
    spark.dataSource.register(NoopDataSource)
    spark.dataSource.register(put_arrow_source())
    spark.dataSource.register(get_arrow_source())
    # Each bucket sink run writes into a new bucket: moto lists a prefix by walking every
    # key of the bucket (S3 does not), so a bucket that fills up run after run would make
    # each later run's LISTs slower for the server's sake, not seglog's.
    # The sink's default, and with the option that merges in task 0 of every micro-batch.
    in_task_merge = {"mergeSmallSegments": "true"}
    sinks: dict[str, Callable[[], str]] = {
        "no-op Python Arrow writer": lambda: "noop",
        "seglog local dir": lambda: str(work / "out"),
        "seglog bucket": lambda: f"s3://{server.create_bucket('sink')}/logs",
        IN_TASK_MERGE: lambda: f"s3://{server.create_bucket('sink')}/logs",
        "Arrow IPC PUT to the bucket": lambda: f"put:{server.create_bucket('put')}",
    }
    readers = {
        "no-op Python Arrow reader": lambda: (
            spark.readStream.format("noop_arrow_bench")
            .option("rows", str(args.rows))
            .option("perTrigger", str(args.per_batch))
        ),
        "seglog local dir": lambda: (
            spark.readStream.format("seglog")
            .option("path", str(work / "src-logs"))
            .option("subscribe", "bench")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(args.per_batch))
        ),
        "seglog bucket": lambda: (
            spark.readStream.format("seglog")
            .option("path", uri)
            .option("subscribe", "bench")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(args.per_batch))
        ),
        "Arrow IPC GET from the bucket": lambda: (
            spark.readStream.format("get_arrow")
            .option("bucket", bucket)
            .option("rows", str(args.rows))
            .option("perTrigger", str(args.per_batch))
            .option("objectRows", str(GET_PEER_OBJECT_ROWS))
        ),
    }
    sinks = {label: make for label, make in sinks.items() if label in args.sink_labels}
    # warm-up: Python workers, the JVM's JIT, both sides of the bucket path
    sink_rate(
        spark,
        str(local_in),
        sinks.get("seglog bucket", sinks[next(iter(sinks))])(),
        work,
        args.per_batch,
    )
    sink_rates: dict[str, list[float]] = {label: [] for label in sinks}
    source_rates: dict[str, list[float]] = {label: [] for label in readers}
    spent: dict[str, list[Window]] = {label: [] for label in sinks}
    with CpuSampler(server.pid) as sampler:
        for r in range(args.repeats):
            # Rotate the order each round: a load spike should not always hit the same
            # case (two cases: A B, B A, A B, ...).
            for label in _rotated(list(sinks), r) if args.only != "source" else ():
                cpu, at = server_cpu_s(server), server.request_counts()
                since = proxy.clock() if proxy is not None else 0.0
                run_ = sink_rate(
                    spark,
                    str(local_in),
                    sinks[label](),
                    work,
                    args.per_batch,
                    in_task_merge if label == IN_TASK_MERGE else None,
                )
                cpu = server_cpu_s(server) - cpu
                windows = [progress_window(p) for p in run_.steady]
                w = sum((sampler.window(a, b) for a, b in windows), Window(0.0, 0.0, 0.0, 0.0))
                spent[label].append(w)
                sink_rates[label].append(run_.rate)
                rows = sum(int(p["numInputRows"]) for p in run_.steady)
                trips = steady_round_trips(proxy, since, windows) if proxy is not None else None
                phases_ms = ", ".join(f"{k} {v:,.0f}" for k, v in phase_means(run_.steady).items())
                limit = bound(
                    rows,
                    w,
                    CORES,
                    batches=len(windows),
                    round_trips=trips,
                    delay_s=args.delay_ms / 1000,
                )
                print(
                    f"  round {r} sink   {label:30s} {run_.rate:12,.0f} rows/s, S3 server "
                    f"{cpu:5.1f} CPU-s, {requests_since(server, at)[0]} ({load()})\n"
                    f"      steady: {limit}\n"
                    f"      mean ms a micro-batch: {phases_ms}",
                    flush=True,
                )
            for label in _rotated(list(readers), r) if args.only != "sink" else ():
                cpu, at = server_cpu_s(server), server.request_counts()
                rate = run(spark, readers[label](), str(work / f"chk-src-{r}-{label[:8]}"))[0]
                cpu = server_cpu_s(server) - cpu
                source_rates[label].append(rate)
                print(
                    f"  round {r} source {label:30s} {rate:12,.0f} rows/s, S3 server "
                    f"{cpu:5.1f} CPU-s, {requests_since(server, at)[0]} ({load()})",
                    flush=True,
                )
    spark.stop()
    if args.only == "source":
        sink_rates = {}
    if args.only == "sink":
        source_rates = {}
    if sink_rates:
        print_rates(
            f"sink, steady-state rows/s ({args.rows:,} rows in micro-batches of "
            f"{args.per_batch:,}, {args.repeats} rounds):",
            sink_rates,
            "no-op Python Arrow writer",
            "Arrow IPC PUT to the bucket",
        )
        print_round_ratios(sink_rates, spent, "Arrow IPC PUT to the bucket")
    if source_rates:
        print_rates(
            "source, steady-state rows/s (same rows and micro-batches):",
            source_rates,
            "no-op Python Arrow reader",
            "Arrow IPC GET from the bucket",
        )


def _rotated(items: list[str], by: int) -> list[str]:
    by %= len(items)
    return items[by:] + items[:by]


# ---------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--per-batch", type=int, default=500_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--commit-mb",
        default="1,100,1000",
        help="micro-batch sizes (MB) whose driver commit is timed",
    )
    ap.add_argument(
        "--history",
        default="10,1000",
        help="prior commits at which a 1 MB micro-batch's commit is timed",
    )
    ap.add_argument("--skip-spark", action="store_true", help="only the Spark-free parts")
    ap.add_argument("--skip-commit", action="store_true", help="no driver commit times")
    ap.add_argument("--phases", action="store_true", help="time a write task's phases")
    ap.add_argument(
        "--only",
        choices=("sink", "source"),
        help="only the sink's or only the source's Spark rounds",
    )
    ap.add_argument(
        "--sinks",
        default=",".join(SINK_CASES),
        help="the sink cases, interleaved in each round: "
        + ", ".join(f"{k} ({v})" for k, v in SINK_CASES.items()),
    )
    ap.add_argument(
        "--delay-ms",
        type=float,
        default=0.0,
        help="latency added to every request by tests/s3_proxy.py (0: none, "
        "no proxy); with it each case's latency ceiling is printed",
    )
    ap.add_argument(
        "--server",
        choices=("seaweedfs", "moto"),
        help="the S3 server (default: SeaweedFS where installed, else moto)",
    )
    args = ap.parse_args()
    unknown = sorted(set(args.sinks.split(",")) - set(SINK_CASES))
    if unknown:
        ap.error(
            f"--sinks: unknown case(s) {', '.join(unknown)}; expected some of "
            f"{', '.join(SINK_CASES)}"
        )
    args.sink_labels = [SINK_CASES[k] for k in args.sinks.split(",")]
    if args.server is None:
        args.server = "moto" if seaweed_unavailable() else "seaweedfs"
    if args.server == "seaweedfs" and seaweed_unavailable():
        ap.error(f"--server seaweedfs: {seaweed_unavailable()}")

    print(f"start: {load()}, {os.cpu_count()} cores, S3 server: {args.server}", flush=True)
    server_type = SeaweedServer if args.server == "seaweedfs" else MotoServer
    with (
        server_type() as server,
        tempfile.TemporaryDirectory(dir="/tmp") as tmp,
        contextlib.ExitStack() as stack,
    ):
        os.environ.update(server.env)
        proxy = None
        if args.delay_ms > 0:
            proxy = stack.enter_context(
                S3Proxy(server.endpoint, delay_s=args.delay_ms / 1000, log_requests=True)
            )
            os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
        work = Path(tmp)
        if not args.skip_spark:
            spark_rates(server, work, args, proxy)
        if args.phases:
            phases(server, work, min(args.rows, 1_000_000))
        if not args.skip_commit:
            commit_by_size(server, [float(s) for s in args.commit_mb.split(",") if s], args.repeats)
            commit_by_history(server, [int(s) for s in args.history.split(",") if s], args.repeats)
    print(f"end: {load()}")


if __name__ == "__main__":
    main()
