"""How often the bucket sink's driver commit loses its create, with and without the
background merger (``streaming/sink_bucket_merger.py``) committing to the same topic log.

Run: ``python benchmarks/bench_sink_commit_races.py [--batches 100] [--tasks 2]
[--gap-ms 150] [--delay-ms 25] [--server auto|seaweedfs|moto]``

An S3 server (``tests/s3_server.py``) behind ``tests/s3_proxy.py`` (``--delay-ms`` before
each request). One topic of 3 partitions; per micro-batch, Spark-free: the driver's view
(``sink_view.driver_view``), ``--tasks`` write tasks (``stage_rows``), the driver's commit
(``sink_bucket_commit.commit``), then ``--gap-ms`` of sleep (the rest of a trigger: the
source's planning, Spark's offset and commit logs). Run twice in one process, each on a
fresh bucket: with the default merge options (a merge every ``mergeMinSegments``
segments of a partition, handed to the background merger after the commit), and with
merges off (``mergeMinSegments`` above the run's segments).

Printed per run: the commits that lost a race (``BucketLogs.last_attempts`` above 1, the
commit's own count: deterministic, not a timing), the segments merged away, the median
and largest round trips of a commit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "tests"))

from s3_proxy import S3Proxy, sequential_round_trips  # noqa: E402
from s3_server import MotoServer, SeaweedServer, seaweed_unavailable  # noqa: E402

from seglog.logstore.manager.log_manager import LogManager  # noqa: E402
from seglog.logstore.util.clock import SYSTEM_CLOCK  # noqa: E402
from seglog.streaming import log_readers, log_writers, sink_bucket_merger, sink_view  # noqa: E402
from seglog.streaming.sink_bucket_commit import commit  # noqa: E402
from seglog.streaming.sink_bucket_staging import stage_rows  # noqa: E402
from seglog.streaming.sink_options import SinkColumns, SinkOptions  # noqa: E402

TOPIC = "out"
ROWS = 30


def _rows(batch: int, task: int) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "key": pa.array([f"k{i}" for i in range(ROWS)], pa.string()),
            "value": pa.array([b"b%d-t%d-%d" % (batch, task, i) for i in range(ROWS)]),
        }
    )


def run(
    proxy: S3Proxy, server: MotoServer | SeaweedServer, args: argparse.Namespace, merges: bool
) -> tuple[int, int, list[int]]:
    """(commits that lost a race, segments merged, round trips of each commit)."""
    uri = f"s3://{server.create_bucket('races')}/out"
    with LogManager(uri) as mgr:
        mgr.create_topic(TOPIC, 3)
    extra = {} if merges else {"mergeMinSegments": str(10 * args.batches * args.tasks)}
    opts = SinkOptions.parse({"path": uri, "topic": TOPIC, **extra})
    columns = SinkColumns.resolve(_rows(0, 0).schema, default_topic=TOPIC)
    lost = 0
    trips: list[int] = []
    for batch in range(args.batches):
        view = sink_view.driver_view(opts, all_topics=False)
        staged = [
            stage_rows(opts, columns, [_rows(batch, t)], "races", batch, t, 0, view=view)
            for t in range(args.tasks)
        ]
        since = proxy.clock()
        commit(staged, batch, opts)
        trips.append(sequential_round_trips(proxy.requests(since)))
        writer = log_writers.bucket_writer(uri, SYSTEM_CLOCK, opts.storage)
        if writer.commits.last_attempts > 1:
            lost += 1
        time.sleep(args.gap_ms / 1000)
    sink_bucket_merger.wait_all()
    merged = sum(m.merged for m in list(sink_bucket_merger._mergers.values()))
    sink_bucket_merger.stop_all(wait=True)
    sink_view.wait_refreshes()
    log_readers.close_all()
    log_writers.close_all()
    return lost, merged, trips


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--gap-ms", type=float, default=150.0)
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
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
        results = {merges: run(proxy, server, args, merges) for merges in (True, False)}
    print(
        f"{'SeaweedFS' if use_seaweed else 'moto'} at {args.delay_ms:.0f} ms a request; "
        f"{args.batches} micro-batches of {args.tasks} tasks, {args.gap_ms:.0f} ms apart; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(f"  {'merges':>8}  lost races  merged away  commit trips (median, max)")
    for merges, (lost, merged, trips) in results.items():
        print(
            f"  {'on' if merges else 'off':>8}  {lost:10d}  {merged:11d}  "
            f"{statistics.median(trips):5.1f}, {max(trips)}"
        )


if __name__ == "__main__":
    main()
