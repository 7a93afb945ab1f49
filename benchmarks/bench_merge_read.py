"""What a bucket reader pays for small segments, and what the sink's merge costs to remove
them: the read side of merging off the micro-batch's critical path, Spark-free.

Run: ``python benchmarks/bench_merge_read.py [--batches 200] [--tasks 2] [--rows 50,5000]
[--delay-ms 25] [--server auto|seaweedfs|moto] [--quick]`` (``--quick``: ``--batches 60``).

An S3 server (``tests/s3_server.py``: SeaweedFS where installed, else moto) on 127.0.0.1
behind ``tests/s3_proxy.py`` (``--delay-ms`` before each request). For each ``--rows``
(rows per task per micro-batch, 100-byte values): ``--batches`` micro-batches of
``--tasks`` write tasks into one partition, staged and committed as the sink does
(``stage_rows``, ``commit``) with the after-commit merge held back
(``mergeMinSegments`` never reached), so the partition holds one segment per fragment:
what a reader meets between two merges, at most. Then, each timed on its own:

1. **read unmerged**: the whole partition through what the source's read tasks run
   (``source_read.read_range``), on a reader opened beforehand (its open is not timed);
2. **merge**: what the sink's maintenance pass runs after a commit
   (``sink_bucket_merge.merge_after_commit`` with its age pass: every stretch of 2 or
   more small segments), its requests and time: the writer's price;
3. **read merged**: the same read, on a new reader, of the merged partition.

The peer of each read is the other read of the same records in the same run; the
figures are the reads' times, their requests by kind, and the ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from s3_proxy import S3Proxy  # noqa: E402
from s3_server import MotoServer, SeaweedServer, seaweed_unavailable  # noqa: E402

from seglog.datasource.schema import arrow_schema  # noqa: E402
from seglog.logstore.bucket.bucket_manager import BucketLogManager  # noqa: E402
from seglog.logstore.util.clock import SYSTEM_CLOCK  # noqa: E402
from seglog.streaming import log_readers  # noqa: E402
from seglog.streaming.read_planning import ReadRange  # noqa: E402
from seglog.streaming.sink_bucket_commit import commit  # noqa: E402
from seglog.streaming.sink_bucket_merge import merge_after_commit  # noqa: E402
from seglog.streaming.sink_bucket_staging import stage_rows  # noqa: E402
from seglog.streaming.sink_options import (  # noqa: E402
    DEFAULT_MERGE_SMALL_SEGMENT_BYTES,
    SinkColumns,
    SinkOptions,
)
from seglog.streaming.source_read import read_range  # noqa: E402

VALUE_BYTES = 100
TOPIC = "out"


def _fmt(kinds: Counter[str]) -> str:
    return " ".join(f"{k}={n}" for k, n in sorted(kinds.items()))


def timed_read(uri: str, end: int, proxy: S3Proxy) -> tuple[float, Counter[str], int]:
    """Seconds, requests by kind and records of one read of ``[0, end)`` by a new reader
    (opened and refreshed before the clock starts)."""
    log_readers.close_all()
    with log_readers.reader([uri]) as mgr:
        mgr.high_watermarks()
    before = proxy.counts
    t = time.perf_counter()
    rows = sum(
        b.num_rows for b in read_range(ReadRange((uri,), TOPIC, 0, 0, end), arrow_schema(False))
    )
    return time.perf_counter() - t, proxy.counts - before, rows


def run_case(
    server: MotoServer | SeaweedServer, proxy: S3Proxy, args: argparse.Namespace, rows: int
) -> None:
    uri = f"s3://{server.create_bucket(f'merge-read-{rows}')}/logs"
    opts = SinkOptions.parse(
        {
            "path": uri,
            "topic": TOPIC,
            "numPartitions": "1",
            "mergeMinSegments": str(10**9),
            "maintenanceIntervalMs": str(10**12),
        }
    )
    data = pa.record_batch(
        {
            "key": pa.array([b"user-%d" % (i % 1000) for i in range(rows)]),
            "value": pa.array([b"v" * VALUE_BYTES] * rows),
        }
    )
    cols = SinkColumns.resolve(data.schema, default_topic=TOPIC)
    t = time.perf_counter()
    for batch_id in range(args.batches):
        staged = [
            stage_rows(opts, cols, [data], "bench-merge-read", batch_id, task, 0)
            for task in range(args.tasks)
        ]
        commit(staged, batch_id, opts)
    mgr = BucketLogManager(uri)
    ps = mgr.state.partition(TOPIC, 0)
    if ps is None:
        raise RuntimeError(f"{uri}: {TOPIC}-0 was not written")
    segs, end = len(ps.segments), ps.high_watermark
    size = ps.size_in_bytes
    print(
        f"{rows} rows a task: {args.batches} micro-batches x {args.tasks} tasks, "
        f"{segs} segments of {size / segs / 1e3:.1f} kB on average "
        f"({time.perf_counter() - t:.0f} s to write; load {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    unmerged_s, unmerged_kinds, n = timed_read(uri, end, proxy)
    before = proxy.counts
    t = time.perf_counter()
    merged = merge_after_commit(
        mgr,
        [(TOPIC, 0)],
        SYSTEM_CLOCK,
        min_segments=2,
        small_bytes=DEFAULT_MERGE_SMALL_SEGMENT_BYTES,
        age_pass=True,
    )
    merge_s, merge_kinds = time.perf_counter() - t, proxy.counts - before
    after = len(mgr.state.partition(TOPIC, 0).segments)
    mgr.close()
    merged_s, merged_kinds, m = timed_read(uri, end, proxy)
    if m != n or n != rows * args.tasks * args.batches:
        raise RuntimeError(f"read {n} then {m} records, wrote {rows * args.tasks * args.batches}")
    print(
        f"  read unmerged ({segs} segments): {unmerged_s * 1000:8.0f} ms, "
        f"{sum(unmerged_kinds.values())} requests ({_fmt(unmerged_kinds)})"
    )
    print(
        f"  merge ({merged} segments into {after}): {merge_s * 1000:8.0f} ms, "
        f"{sum(merge_kinds.values())} requests ({_fmt(merge_kinds)})"
    )
    print(
        f"  read merged ({after} segments):   {merged_s * 1000:8.0f} ms, "
        f"{sum(merged_kinds.values())} requests ({_fmt(merged_kinds)})"
    )
    print(
        f"  unmerged / merged read time: {unmerged_s / merged_s:.1f}x; records/s "
        f"{n / unmerged_s:,.0f} unmerged, {n / merged_s:,.0f} merged",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument(
        "--rows", default="50,5000", help="rows per task per micro-batch, one case each"
    )
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    parser.add_argument("--quick", action="store_true", help="--batches 60")
    args = parser.parse_args()
    if args.quick:
        args.batches = 60
    use_seaweed = args.server == "seaweedfs" or (
        args.server == "auto" and seaweed_unavailable() is None
    )
    server: MotoServer | SeaweedServer = SeaweedServer() if use_seaweed else MotoServer()
    with server, S3Proxy(server.endpoint, delay_s=args.delay_ms / 1000) as proxy:
        os.environ.update({**server.env, "AWS_ENDPOINT_URL": proxy.endpoint})
        print(
            f"{'SeaweedFS' if use_seaweed else 'moto'} behind the proxy, "
            f"{args.delay_ms:.0f} ms per request"
        )
        for rows in (int(r) for r in args.rows.split(",")):
            run_case(server, proxy, args, rows)
        log_readers.close_all()


if __name__ == "__main__":
    main()
