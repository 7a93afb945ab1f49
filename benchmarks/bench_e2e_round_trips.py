"""Round trips of each step of a seglog -> seglog micro-batch on a bucket (issue 25, goal
4), Spark-free: what ``bench_e2e_latency.py``'s bucket case waits for on the store,
counted instead of timed, so a loaded machine does not blur it.

Run: ``python benchmarks/bench_e2e_round_trips.py [--batches 12] [--appends 3]
[--delay-ms 25] [--server auto|seaweedfs|moto]``

An S3 server (``tests/s3_server.py``) behind ``tests/s3_proxy.py`` (``--delay-ms`` before
each request, ``log_requests``), two log dirs in one bucket (``in``, ``out``), each role
with a manager of its own, as each runs in a process of its own under Spark. Per
micro-batch, one step after the other: the producer's ``append_many`` of one record,
``--appends`` times (a producer at 10 records/s between triggers of ~300 ms); the
source's trigger (a read-only manager's ``high_watermarks``: its ``latestOffset``); the
read task (another read-only manager: its look at the log, then ``read_chunks`` of the
new offsets); the sink's task (``sink_bucket_staging.stage_rows`` of those records, through
this process's shared reader of ``out``); the driver's commit
(``sink_bucket_commit.commit``); a consumer's look at ``out`` (``high_watermarks``).

``--pipelined``: the read task and the sink's task as one step, as Spark runs them in
one task (the sink's ``stage_rows`` pulls its rows from a generator that makes the
read's requests when first asked), so what the sink's task does while its rows are on
their way is counted as Spark's task waits for it.

Printed per step: the median over the micro-batches after the first two (the writers'
and readers' opens) of its sequential round trips (``s3_proxy.sequential_round_trips``:
requests made at once count once) and of its requests, and its median ms (the round trips
times ``--delay-ms`` plus the client's and server's own time, which load does blur).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TypeVar

import pyarrow as pa

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "tests"))

from s3_proxy import S3Proxy, sequential_round_trips  # noqa: E402
from s3_server import MotoServer, SeaweedServer, seaweed_unavailable  # noqa: E402

from seglog.logstore.log_dirs_api import LogDirsView  # noqa: E402
from seglog.logstore.manager.log_manager import LogManager, open_log_dirs  # noqa: E402
from seglog.logstore.records.record_codec import decode_batches, encode_batches  # noqa: E402
from seglog.streaming.sink_bucket_commit import commit  # noqa: E402
from seglog.streaming.sink_bucket_staging import stage_rows  # noqa: E402
from seglog.streaming.sink_options import SinkColumns, SinkOptions  # noqa: E402

STEPS = ("publish", "latestOffset", "read task", "sink task", "commit", "consumer look")
PIPELINED_STEPS = ("publish", "latestOffset", "read + sink task", "commit", "consumer look")
SKIP = 2
T = TypeVar("T")


def _publish(producer: LogManager, appends: int) -> None:
    for _ in range(appends):
        value = pa.array([b"%d" % time.time_ns()])
        producer.append_many({("in", 0): encode_batches(value)})


def _high_watermark(mgr: LogDirsView, topic: str) -> int:
    return mgr.high_watermarks()[(topic, 0)]


def _read(task: LogDirsView, start: int, end: int) -> pa.RecordBatch:
    """A read task: its look at the log, then the records of [start, end)."""
    task.high_watermarks()
    values = [
        v
        for c in task.get_log("in", 0).read_chunks(start, end)
        for v in decode_batches(c, start_offset=start).column("value").to_pylist()
    ]
    return pa.record_batch({"value": pa.array(values, pa.binary())})


def _read_schema() -> pa.Schema:
    return pa.schema([("value", pa.binary())])


def _lazy_read(task: LogDirsView, start: int, end: int) -> Iterator[pa.RecordBatch]:
    """The read task's rows as a Spark task hands them to the sink's: its requests are
    made when the first rows are asked for."""
    yield _read(task, start, end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--appends", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    parser.add_argument(
        "--pipelined",
        action="store_true",
        help="the read task and the sink's task as one step, as one Spark task runs them",
    )
    args = parser.parse_args()
    steps = PIPELINED_STEPS if args.pipelined else STEPS
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
        producer = LogManager(in_dir)
        source = open_log_dirs([in_dir], read_only=True)
        task = open_log_dirs([in_dir], read_only=True)
        consumer = open_log_dirs([out_dir], read_only=True)
        trips: dict[str, list[int]] = {s: [] for s in steps}
        requests: dict[str, list[int]] = {s: [] for s in steps}
        took_ms: dict[str, list[float]] = {s: [] for s in steps}

        def step(name: str, batch: int, call: Callable[[], T]) -> T:
            since = proxy.clock()
            t0 = time.perf_counter()
            result = call()
            took = (time.perf_counter() - t0) * 1000
            made = proxy.requests(since)
            if batch >= SKIP:
                trips[name].append(sequential_round_trips(made))
                requests[name].append(len(made))
                took_ms[name].append(took)
            return result

        read_from = 0
        for batch in range(args.batches):
            step("publish", batch, partial(_publish, producer, args.appends))
            end = step("latestOffset", batch, partial(_high_watermark, source, "in"))
            columns = SinkColumns.resolve(_read_schema(), default_topic="out")
            if args.pipelined:
                staged = step(
                    "read + sink task",
                    batch,
                    partial(
                        stage_rows,
                        opts,
                        columns,
                        _lazy_read(task, read_from, end),
                        sink,
                        batch,
                        0,
                        0,
                    ),
                )
            else:
                rows = step("read task", batch, partial(_read, task, read_from, end))
                assert rows.num_rows == end - read_from
                staged = step(
                    "sink task",
                    batch,
                    partial(stage_rows, opts, columns, [rows], sink, batch, 0, 0),
                )
            assert sum(f.records for f in staged.fragments) == end - read_from
            step("commit", batch, partial(commit, [staged], batch, opts))
            step("consumer look", batch, partial(_high_watermark, consumer, "out"))
            read_from = end
        producer.close()
        for view in (source, task, consumer):
            view.close()
    print(
        f"{'SeaweedFS' if use_seaweed else 'moto'} at {args.delay_ms:.0f} ms a request; "
        f"{args.batches - SKIP} micro-batches of {args.appends} appends (medians); "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(f"  {'step':>14}  round trips  requests       ms")
    for name in steps:
        print(
            f"  {name:>14}  {statistics.median(trips[name]):11.1f}  "
            f"{statistics.median(requests[name]):8.1f}  {statistics.median(took_ms[name]):7.0f}"
        )
    total = sum(statistics.median(trips[s]) for s in steps)
    print(f"  {'all':>14}  {total:11.1f}")


if __name__ == "__main__":
    main()
