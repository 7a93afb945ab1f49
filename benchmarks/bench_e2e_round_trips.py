"""Round trips of each step of a seglog -> seglog micro-batch on a bucket (issue 25, goal
4), Spark-free: what ``bench_e2e_latency.py``'s bucket case waits for on the store,
counted instead of timed, so a loaded machine does not blur it.

Run: ``python benchmarks/bench_e2e_round_trips.py [--batches 24] [--appends 3]
[--delay-ms 25] [--server auto|seaweedfs|moto] [--no-plan] [--tail]
[--show BATCH]``

An S3 server (``tests/s3_server.py``) behind ``tests/s3_proxy.py`` (``--delay-ms`` before
each request, ``log_requests``), two log dirs in one bucket (``in``, ``out``), each role
with a manager of its own, as each runs in a process of its own under Spark. Per
micro-batch, one step after the other: the producer's ``append_many`` of one record,
``--appends`` times (a producer at 10 records/s between triggers of ~300 ms); the
source's trigger and planning, through the Spark source's own reader without Spark
(``SeglogStreamReader.latestOffset``, then ``partitions``: the input partitions, each
with its read plan); the read task (``read_input_partition``, what the reader's ``read``
runs, in a Python worker process of its own, reused from batch to batch as Spark's are,
handed the pickled input partitions; ``--no-plan``: without their plans, as before
them, so the task looks at the log first); the sink's planning (the writer pickled to
the tasks with the driver's view of its topics: ``sink_view.driver_view``, no request on
its path; the requests counted there are its background refresh's, about once a second,
waited for so that they do not blur the next step's count); the sink's task
(``sink_bucket_staging.stage_rows`` of those records with that view; ``--no-view``: the
task's own look at the topic, through this process's shared reader of ``out``, as before
the view); the driver's commit (``sink_bucket_commit.commit``); a consumer's
look at ``out`` (``high_watermarks``).

Printed per step: the median over the micro-batches after the first two (the writers'
and readers' opens) of its CPU time (``time.process_time``: this process's threads, the
proxy's among them, so compare runs of the same requests; the read task's worker is
another process and not in it), of its sequential round trips (``s3_proxy.sequential_round_trips``:
requests made at once count once) and of its requests, and its median ms (the round trips
times ``--delay-ms`` plus the client's and server's own time, which load does blur), and
the p90 and the most round trips of each step. The micro-batches run one after the
other, but the commit's background merger (``sink_bucket_merger``, due every
``mergeMinSegments`` micro-batches: ``--batches 70`` sees two merges) runs beside the
next steps, as under Spark. Its requests are counted apart: those on its own connections
(the ones that upload a merged segment). Its refresh before a merge may use other
connections and then shows as commit GETs of ``out`` in whatever step it overlapped.
``--tail``: every step above its median, and what it did besides a steady step's
requests (lost creates, snapshots, hints, the turn, commits read), then the merger's
requests and lost creates: where the tail of ``bench_e2e_latency.py``'s bucket case
comes from, deterministically. ``--show BATCH``: every request of that micro-batch's steps.
A step counts the requests answered before it returned: what it can have waited for. The
snapshots and hints the writers write after their commits, off the caller's path
(``bucket_snapshot_writer``), are waited for after the step, uncounted in it, and shown on
a row of their own ("snapshots, off path": requests per micro-batch).
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TypeVar

import pyarrow as pa

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "tests"))

from pyspark.sql.datasource import InputPartition  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: E402
from s3_proxy import RequestRecord, S3Proxy, sequential_round_trips  # noqa: E402
from s3_server import MotoServer, SeaweedServer, seaweed_unavailable  # noqa: E402

from seglog.datasource.schema import source_schema  # noqa: E402
from seglog.datasource.stream_reader import SeglogStreamReader  # noqa: E402
from seglog.logstore.bucket.bucket_manager import BucketLogManager  # noqa: E402
from seglog.logstore.log_dirs_api import LogDirsView  # noqa: E402
from seglog.logstore.manager.log_manager import LogManager, open_log_dirs  # noqa: E402
from seglog.logstore.records.record_codec import encode_batches  # noqa: E402
from seglog.streaming import sink_view  # noqa: E402
from seglog.streaming.sink_bucket_commit import bucket_writer, commit  # noqa: E402
from seglog.streaming.sink_bucket_merger import wait_all  # noqa: E402
from seglog.streaming.sink_bucket_staging import stage_rows  # noqa: E402
from seglog.streaming.sink_options import SinkColumns, SinkOptions  # noqa: E402

STEPS = (
    "publish",
    "latestOffset",
    "planning",
    "read task",
    "sink planning",
    "sink task",
    "commit",
    "consumer look",
)
OFF_PATH = "snapshots, off path"
SKIP = 2
T = TypeVar("T")


def _publish(producer: BucketLogManager, appends: int) -> None:
    for _ in range(appends):
        value = pa.array([b"%d" % time.time_ns()])
        producer.append_many({("in", 0): encode_batches(value)})


def _high_watermark(mgr: LogDirsView, topic: str) -> int:
    return mgr.high_watermarks()[(topic, 0)]


WORKER = """
import pickle, sys
from seglog.datasource.stream_reader import read_input_partition

for line in sys.stdin:
    partitions = pickle.loads(bytes.fromhex(line))
    values = [v for p in partitions for b in read_input_partition(p)
              for v in b.column("value").to_pylist()]
    print(pickle.dumps(values).hex(), flush=True)
"""


def _read(worker: subprocess.Popen[str], partitions: list[InputPartition]) -> pa.RecordBatch:
    """A read task in its Python worker: the records of its input partitions."""
    assert worker.stdin is not None and worker.stdout is not None
    worker.stdin.write(pickle.dumps(partitions).hex() + "\n")
    worker.stdin.flush()
    values = pickle.loads(bytes.fromhex(worker.stdout.readline()))
    return pa.record_batch({"value": pa.array(values, pa.binary())})


def _without_plans(partitions: list[InputPartition]) -> list[InputPartition]:
    return [InputPartition(replace(p.value, plan=None)) for p in partitions]


def _planned_view(opts: SinkOptions, no_view: bool) -> sink_view.TopicView | None:
    """The driver's view shipped with the writer; its background refresh, if one
    started, waited for (off the critical path under Spark, counted here)."""
    if no_view:
        return None
    view = sink_view.driver_view(opts, all_topics=False)
    sink_view.wait_refreshes()
    return view


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--appends", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    parser.add_argument(
        "--no-plan",
        action="store_true",
        help="read tasks without their read plans (as before them)",
    )
    parser.add_argument(
        "--tail",
        action="store_true",
        help="also every step above its median, and the background merger's requests",
    )
    parser.add_argument(
        "--show",
        type=int,
        metavar="BATCH",
        help="also every request of that micro-batch",
    )
    parser.add_argument(
        "--no-view",
        action="store_true",
        help="the sink task looks at its topic itself (before sink_view)",
    )
    args = parser.parse_args()
    use_seaweed = args.server == "seaweedfs" or (
        args.server == "auto" and seaweed_unavailable() is None
    )
    server: MotoServer | SeaweedServer = SeaweedServer() if use_seaweed else MotoServer()
    with (
        server,
        S3Proxy(server.endpoint, delay_s=args.delay_ms / 1000, log_requests=True) as proxy,
    ):
        os.environ.update({**server.env, "AWS_ENDPOINT_URL": proxy.endpoint})
        bucket = server.create_bucket("e2e")
        in_dir, out_dir = f"s3://{bucket}/in", f"s3://{bucket}/out"
        for log_dir, topic in ((in_dir, "in"), (out_dir, "out")):
            with LogManager(log_dir) as mgr:
                mgr.create_topic(topic, 1, {"retention.ms": -1})
        opts = SinkOptions.parse({"path": out_dir, "topic": "out"})
        sink = "e2e-round-trips"
        producer = BucketLogManager(in_dir)
        source_opts = {"path": in_dir, "subscribe": "in"}
        source = SeglogStreamReader(source_opts, source_schema(source_opts))
        offsets = source.initialOffset()
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        consumer = open_log_dirs([out_dir], read_only=True)
        made_by: dict[str, list[list[RequestRecord]]] = {s: [] for s in STEPS}
        took_ms: dict[str, list[float]] = {s: [] for s in STEPS}
        cpu_ms: dict[str, list[float]] = {s: [] for s in STEPS}
        off_path: list[int] = []

        def step(name: str, batch: int, call: Callable[[], T]) -> T:
            since = proxy.clock()
            t0 = time.perf_counter()
            c0 = time.process_time()
            result = call()
            took = (time.perf_counter() - t0) * 1000
            cpu = (time.process_time() - c0) * 1000
            until = proxy.clock()
            made = [r for r in proxy.requests(since) if r.replied is not None and r.replied < until]
            # The writers' snapshots started by this step, waited for outside it.
            producer.commits.flush_snapshots()
            bucket_writer(opts).commits.flush_snapshots()
            later = len(proxy.requests(since)) - len(made)
            if batch >= SKIP:
                made_by[name].append(made)
                took_ms[name].append(took)
                cpu_ms[name].append(cpu)
                off_path.append(later)
            return result

        for batch in range(args.batches):
            step("publish", batch, partial(_publish, producer, args.appends))
            end = step(
                "latestOffset", batch, partial(source.latestOffset, offsets, ReadAllAvailable())
            )
            partitions = step("planning", batch, partial(source.partitions, offsets, end))
            if args.no_plan:
                partitions = _without_plans(partitions)
            rows = step("read task", batch, partial(_read, worker, partitions))
            assert rows.num_rows == end["in"]["0"] - offsets["in"]["0"], (rows, end)
            columns = SinkColumns.resolve(rows.schema, default_topic="out")
            view = step("sink planning", batch, partial(_planned_view, opts, args.no_view))
            staged = step(
                "sink task",
                batch,
                partial(stage_rows, opts, columns, [rows], sink, batch, 0, 0, view=view),
            )
            step("commit", batch, partial(commit, [staged], batch, opts))
            step("consumer look", batch, partial(_high_watermark, consumer, "out"))
            offsets = end
        merger_done = wait_all(60.0)
        producer.close()
        consumer.close()
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()
        everything = proxy.requests()
    # The background merger has its own manager, so connections of its own: those that
    # uploaded a merged segment. Its requests are its, not the step's they overlapped.
    merger = {r.connection for r in everything if r.kind == "PUT" and "/out/out-0/" in r.target}
    for name in STEPS:
        made_by[name] = [[r for r in made if r.connection not in merger] for made in made_by[name]]
    trips = {s: [sequential_round_trips(made) for made in made_by[s]] for s in STEPS}
    print(
        f"{'SeaweedFS' if use_seaweed else 'moto'} at {args.delay_ms:.0f} ms a request; "
        f"{args.batches - SKIP} micro-batches of {args.appends} appends (medians); "
        f"read tasks {'without' if args.no_plan else 'with'} their read plans; "
        f"{'no view (the task looks)' if args.no_view else 'the driver view'}; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(f"  {'step':>14}  round trips  requests       ms   trips p90   max  CPU ms")
    for name in STEPS:
        print(
            f"  {name:>14}  {statistics.median(trips[name]):11.1f}  "
            f"{statistics.median(len(m) for m in made_by[name]):8.1f}  "
            f"{statistics.median(took_ms[name]):7.0f}  {_p90(trips[name]):10.0f}  "
            f"{max(trips[name]):4d}  {statistics.median(cpu_ms[name]):6.2f}"
        )
    # The planning's requests are its background refresh's: off the micro-batch's path.
    total = sum(statistics.median(trips[s]) for s in STEPS if s != "sink planning")
    print(f"  {'all':>14}  {total:11.1f}")
    batches = args.batches - SKIP
    print(f"  {OFF_PATH:>14}  {sum(off_path) / batches:.1f} requests a micro-batch, not waited for")
    if args.tail:
        _print_tail(made_by, trips, everything, merger, merger_done)
    if args.show is not None:
        _show(made_by, args.show)


def _show(made_by: dict[str, list[list[RequestRecord]]], batch: int) -> None:
    """Every request of every step of micro-batch ``batch`` (ms from the step's first)."""
    for name in STEPS:
        made = sorted(made_by[name][batch - SKIP], key=lambda r: r.arrived)
        print(f"  {name} of micro-batch {batch}: {len(made)} requests")
        for r in made:
            start = made[0].arrived
            end = r.replied if r.replied is not None else r.answered
            print(
                f"    {(r.arrived - start) * 1000:6.0f} {(end - start) * 1000:6.0f} ms  "
                f"{r.status} {r.kind:<15} {r.target[:110]}"
            )


def _p90(values: list[int]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def _what(made: list[RequestRecord]) -> str:
    """What in ``made`` is not a steady step's: lost creates, snapshots, turn requests."""
    lost = sum(r.kind == "CONDITIONAL_PUT" and r.status == 412 for r in made)
    snaps = sum(r.kind == "PUT" and "/snapshots/" in r.target for r in made)
    hints = sum("last-snapshot" in r.target for r in made)
    turn = sum(r.target.endswith("/turn") for r in made)
    # By log: the merger's refresh before a merge reads out's commits on connections
    # that upload nothing, so they count in whatever step they overlapped.
    commits_in = sum(
        r.kind == "GET" and "/in/_seglog/" in r.target and "/log/" in r.target for r in made
    )
    commits_out = sum(
        r.kind == "GET" and "/out/_seglog/" in r.target and "/log/" in r.target for r in made
    )
    words = [
        f"{n} {what}"
        for n, what in (
            (lost, "lost creates"),
            (snaps, "snapshot PUTs"),
            (hints, "hint requests"),
            (turn, "turn requests"),
            (commits_in, "commit GETs of in"),
            (commits_out, "commit GETs of out"),
        )
        if n
    ]
    return ", ".join(words) or "-"


def _print_tail(
    made_by: dict[str, list[list[RequestRecord]]],
    trips: dict[str, list[int]],
    everything: list[RequestRecord],
    merger: set[int],
    merger_done: bool,
) -> None:
    """Every step of every micro-batch that took more round trips than the step's
    median, and why; then the merges the background merger made meanwhile."""
    print("  steps above their median (micro-batch: round trips, what else they did):")
    for name in STEPS:
        median = statistics.median(trips[name])
        above = [
            f"{i + SKIP}: {t} ({_what(made_by[name][i])})"
            for i, t in enumerate(trips[name])
            if t > median
        ]
        print(f"  {name:>14}  " + ("; ".join(above) if above else "none"))
    merges = [r for r in everything if r.connection in merger]
    lost_out = [
        r
        for r in everything
        if r.kind == "CONDITIONAL_PUT" and r.status == 412 and "/out/" in r.target
    ]
    print(
        f"  merger: {len(merges)} requests ({sequential_round_trips(merges)} round trips"
        f"{'' if merger_done else ', still running at the end'}), "
        f"{sum(r.kind == 'PUT' and '/out/out-0/' in r.target for r in merges)} merged "
        f"uploads; lost creates in out's logs: {len(lost_out)} "
        f"({sum(r.connection in merger for r in lost_out)} the merger's)"
    )


if __name__ == "__main__":
    main()
