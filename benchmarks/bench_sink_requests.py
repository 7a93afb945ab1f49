"""The bucket sink's requests per micro-batch, by kind, and the driver's sequential round
trips on the commit's critical path (issue 25's baseline), Spark-free.

Run: ``python benchmarks/bench_sink_requests.py [--batches 10] [--tasks 2]
[--partitions 3] [--rows 2000] [--delay-ms 25] [--server auto|seaweedfs|moto] [--quick]``
(``--quick``: ``--batches 4``).

An S3 server (``tests/s3_server.py``: SeaweedFS where installed, else moto) on 127.0.0.1
behind ``tests/s3_proxy.py`` (``--delay-ms`` before each request, ``log_requests``).
Each micro-batch runs what Spark would run for it, in this process, one step after the
other: ``--tasks`` write tasks (``sink_bucket_staging.stage_rows``: ``--rows`` rows each,
100-byte values, routed to ``--partitions`` partitions, encoded and uploaded), then the
driver's commit (``sink_bucket_commit.commit``). Spark's own calls around them (building
the writer, its planning) are not in these figures.

Method: the proxy logs every request with its arrival and its answer on the proxy's
clock; the tasks' requests are those that arrived between the first task's start and
the last task's end, the commit's those between the commit's call and its return (nothing
else talks to the server meanwhile). A merge the commit hands to the background merger
(``sink_bucket_merger``) is waited for after the commit returns and counted apart: it is
off the critical path (Spark runs the next micro-batch meanwhile), but in the total of
requests per micro-batch. The sequential round trips of the commit are the
longest chain of its requests each arriving after the one before it was answered
(``s3_proxy.sequential_round_trips``): requests the driver made at once (deleting losers'
uploads, reading commits in parallel) count once, so it is what the commit's duration is
made of at ``--delay-ms`` per request; "commit ms / delay" is printed beside it as the
check (it also holds the client's and server's own time).

The first micro-batch (it creates the topic and opens the bucket's writer) is printed on
its own; the others are summed as the steady state (median per micro-batch).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from s3_proxy import RequestRecord, S3Proxy, sequential_round_trips  # noqa: E402
from s3_server import MotoServer, SeaweedServer, seaweed_unavailable  # noqa: E402

from seglog.streaming.sink_bucket_commit import commit  # noqa: E402
from seglog.streaming.sink_bucket_merger import wait_all  # noqa: E402
from seglog.streaming.sink_bucket_staging import stage_rows  # noqa: E402
from seglog.streaming.sink_options import SinkColumns, SinkOptions  # noqa: E402

VALUE_BYTES = 100


def _kinds(records: list[RequestRecord]) -> Counter[str]:
    return Counter(r.kind for r in records)


def _fmt(kinds: Counter[str]) -> str:
    return " ".join(f"{k}={n}" for k, n in sorted(kinds.items()))


def _fmt_avg(kinds: Counter[str], n: int) -> str:
    return " ".join(f"{k}={v / n:.1f}" for k, v in sorted(kinds.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rows", type=int, default=2000, help="rows per task per micro-batch")
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    parser.add_argument("--quick", action="store_true", help="--batches 4")
    args = parser.parse_args()
    if args.quick:
        args.batches = 4
    if args.batches < 2:
        parser.error("--batches: at least 2 (the first is printed on its own)")

    use_seaweed = args.server == "seaweedfs" or (
        args.server == "auto" and seaweed_unavailable() is None
    )
    server: MotoServer | SeaweedServer = SeaweedServer() if use_seaweed else MotoServer()
    delay_s = args.delay_ms / 1000
    with server, S3Proxy(server.endpoint, delay_s=delay_s, log_requests=True) as proxy:
        os.environ.update({**server.env, "AWS_ENDPOINT_URL": proxy.endpoint})
        uri = f"s3://{server.create_bucket('sink-requests')}/logs"
        opts = SinkOptions.parse(
            {"path": uri, "topic": "out", "numPartitions": str(args.partitions)}
        )
        data = pa.record_batch(
            {
                "key": pa.array([b"user-%d" % (i % 1000) for i in range(args.rows)]),
                "value": pa.array([b"v" * VALUE_BYTES] * args.rows),
            }
        )
        cols = SinkColumns.resolve(data.schema, default_topic="out")
        print(
            f"{'SeaweedFS' if use_seaweed else 'moto'} behind the proxy, {args.delay_ms:.0f} ms "
            f"per request; {args.tasks} tasks x {args.rows} rows -> {args.partitions} "
            f"partitions per micro-batch; load {os.getloadavg()[0]:.1f}"
        )
        task_kinds: Counter[str] = Counter()
        commit_kinds: Counter[str] = Counter()
        trips: list[int] = []
        task_trips: list[int] = []
        commit_ms: list[float] = []
        merge_kinds: Counter[str] = Counter()
        merge_trips: list[int] = []
        for batch_id in range(args.batches):
            t0 = proxy.clock()
            staged = []
            bounds = [t0]
            for task in range(args.tasks):
                staged.append(stage_rows(opts, cols, [data], "bench-sink", batch_id, task, 0))
                bounds.append(proxy.clock())
            t1 = proxy.clock()
            result = commit(staged, batch_id, opts)
            t2 = proxy.clock()
            if not result.published:
                raise RuntimeError(f"micro-batch {batch_id} published nothing: {result}")
            # The merge the commit handed to the background merger, if any: waited for
            # here so that its requests are counted apart (Spark would run the next
            # micro-batch meanwhile).
            if not wait_all(300):
                raise RuntimeError(f"the merge after micro-batch {batch_id} did not end")
            merging = proxy.requests(t2)
            logged = proxy.requests(t0)
            tasks = [r for r in logged if r.arrived < t1]
            driver = [r for r in logged if t1 <= r.arrived <= t2]
            chain = sequential_round_trips(driver)
            task_chains = [
                sequential_round_trips(r for r in tasks if a <= r.arrived < b)
                for a, b in zip(bounds, bounds[1:], strict=False)
            ]
            ms = (t2 - t1) * 1000
            if batch_id == 0:
                print(
                    f"  first micro-batch: tasks {len(tasks)} requests ({_fmt(_kinds(tasks))},"
                    f" {max(task_chains)} sequential round trips in the longest task);"
                    f" commit {len(driver)} requests ({_fmt(_kinds(driver))}), {chain} "
                    f"sequential round trips, {ms:.0f} ms = {ms / args.delay_ms:.1f} x delay"
                )
                continue
            task_kinds += _kinds(tasks)
            merge_kinds += _kinds(merging)
            if merging:
                merge_trips.append(sequential_round_trips(merging))
            task_trips.append(max(task_chains))
            commit_kinds += _kinds(driver)
            trips.append(chain)
            commit_ms.append(ms)
        n = args.batches - 1
        print(
            f"  steady, per micro-batch (mean of {n}): tasks "
            f"{sum(task_kinds.values()) / n:.1f} requests ({_fmt_avg(task_kinds, n)}, "
            f"{sum(task_kinds.values()) / n / args.tasks:.1f} per task, median "
            f"{statistics.median(task_trips):.0f} sequential round trips in the longest "
            f"task); commit "
            f"{sum(commit_kinds.values()) / n:.1f} requests ({_fmt_avg(commit_kinds, n)})"
        )
        total = sum(task_kinds.values()) + sum(commit_kinds.values()) + sum(merge_kinds.values())
        print(
            f"  background merges (off the critical path): {len(merge_trips)} of {n} "
            f"micro-batches, {sum(merge_kinds.values()) / n:.1f} requests per micro-batch "
            f"({_fmt_avg(merge_kinds, n) or 'none'}), at most "
            f"{max(merge_trips, default=0)} sequential round trips; total "
            f"{total / n:.1f} requests per micro-batch"
        )
        med_ms = statistics.median(commit_ms)
        print(
            f"  driver commit: sequential round trips median {statistics.median(trips):.0f} "
            f"(min {min(trips)}, max {max(trips)}); commit median {med_ms:.0f} ms = "
            f"{med_ms / args.delay_ms:.1f} x delay; floor at {args.delay_ms:.0f} ms per "
            f"request: {statistics.median(trips) * args.delay_ms:.0f} ms"
        )


if __name__ == "__main__":
    main()
