"""``seglog upgrade``'s requests, sequential round trips and time, for a bucket of
``--topics`` legacy topics (issue 25: buckets written before per-topic commit logs).

Run: ``python benchmarks/bench_upgrade.py [--topics 10] [--partitions 3] [--appends 3]
[--delay-ms 25] [--server auto|seaweedfs|moto]``.

An S3 server (``tests/s3_server.py``: SeaweedFS where installed, else moto) on 127.0.0.1;
each bucket is written straight to the server as seglog before per-topic logs wrote it
(``BucketLogManager(topic_logs=False)``: every topic in the catalog log, ``--appends``
appends per partition), then upgraded through ``tests/s3_proxy.py`` (``--delay-ms``
before each request, every request logged). Printed per bucket: the manager's open, then
``upgrade_topic_logs()`` (what ``seglog upgrade URI`` runs after its open): requests by
kind, the longest chain of requests each sent after the one before was answered
(``s3_proxy.sequential_round_trips``), and the time (with "x delay" as the check). The
peer in the same run: the same upgrade of a bucket of ONE legacy topic; the ratio says
what the other topics cost.
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
from s3_proxy import S3Proxy, sequential_round_trips  # noqa: E402
from s3_server import MotoServer, SeaweedServer, seaweed_unavailable  # noqa: E402

from seglog.logstore.bucket.bucket_manager import BucketLogManager  # noqa: E402
from seglog.logstore.records.record_codec import encode_batches  # noqa: E402


def legacy_bucket(uri: str, options: dict[str, str], topics: int, args: argparse.Namespace) -> None:
    records = encode_batches(pa.array([b"v" * 100] * 50))
    with BucketLogManager(uri, topic_logs=False, storage_options=options) as old:
        for t in range(topics):
            old.create_topic(f"topic-{t:02d}", args.partitions)
            for p in range(args.partitions):
                for _ in range(args.appends):
                    old.append(f"topic-{t:02d}", p, records)


def measure(
    proxy: S3Proxy, uri: str, options: dict[str, str], delay_ms: float
) -> tuple[float, int]:
    """Open and upgrade through the proxy; print both; the upgrade's (ms, round trips)."""
    t0 = proxy.clock()
    mgr = BucketLogManager(uri, storage_options=options)
    t1 = proxy.clock()
    report = mgr.upgrade_topic_logs()
    t2 = proxy.clock()
    mgr.close()
    logged = proxy.requests(t0)
    for name, a, b in (("open", t0, t1), ("upgrade", t1, t2)):
        part = [r for r in logged if a <= r.arrived <= b]
        kinds = Counter(r.kind for r in part)
        ms = (b - a) * 1000
        print(
            f"    {name}: {len(part)} requests ("
            + " ".join(f"{k}={n}" for k, n in sorted(kinds.items()))
            + f"), {sequential_round_trips(part)} sequential round trips, {ms:.0f} ms = "
            f"{ms / delay_ms:.1f} x delay"
        )
    if os.environ.get("BENCH_UPGRADE_TRACE"):
        for r in sorted((r for r in logged if t1 <= r.arrived <= t2), key=lambda r: r.arrived):
            print(f"      {(r.arrived - t1) * 1000:6.0f} {r.kind:16} {r.target[:90]}")
    if len(report.moved) == 0:
        raise RuntimeError(f"{uri}: nothing moved")
    upgrade = [r for r in logged if t1 <= r.arrived <= t2]
    return (t2 - t1) * 1000, sequential_round_trips(upgrade)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--appends", type=int, default=3, help="appends per partition")
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    args = parser.parse_args()
    use_seaweed = args.server == "seaweedfs" or (
        args.server == "auto" and seaweed_unavailable() is None
    )
    server: MotoServer | SeaweedServer = SeaweedServer() if use_seaweed else MotoServer()
    with server, S3Proxy(server.endpoint, delay_s=args.delay_ms / 1000, log_requests=True) as px:
        os.environ.update(server.env)
        direct = {"aws_endpoint": server.endpoint}
        proxied = {"aws_endpoint": px.endpoint}
        print(
            f"{'SeaweedFS' if use_seaweed else 'moto'} behind the proxy, {args.delay_ms:.0f} ms "
            f"per request; {args.partitions} partitions x {args.appends} appends per topic; "
            f"load {os.getloadavg()[0]:.1f}"
        )
        results = {}
        for topics in (1, args.topics):
            uri = f"s3://{server.create_bucket(f'upgrade-{topics}')}/logs"
            started = time.monotonic()
            legacy_bucket(uri, direct, topics, args)
            print(
                f"  {topics} legacy topic(s) (written directly in "
                f"{time.monotonic() - started:.1f} s):"
            )
            results[topics] = measure(px, uri, proxied, args.delay_ms)
        (one_ms, one_trips), (many_ms, many_trips) = results[1], results[args.topics]
        print(
            f"  upgrade of {args.topics} topics / of 1 topic (the peer): time "
            f"{many_ms / one_ms:.2f}x, sequential round trips {many_trips} vs {one_trips}"
        )


if __name__ == "__main__":
    main()
