"""Writers of one bucket log dir, scaled out: N writer processes appending small batches to
N distinct topics, and M writers into one shared topic, every request delayed by the
proxy (issue 25: the baseline, then per-topic commit logs, where writers of distinct
topics write distinct logs).

Run: ``python benchmarks/bench_writer_scaling.py [--writers 1 2 4 8 16] [--shared 2 4]
[--duration-s 10] [--delay-ms 25] [--records 10] [--server auto|seaweedfs|moto]
[--quick]``  (``--quick``: ``--writers 1 2 --shared 2 --duration-s 3``).

An S3 server (``tests/s3_server.py``: SeaweedFS where installed, else moto) is started on
127.0.0.1 behind ``tests/s3_proxy.py`` (``--delay-ms`` before each request). Each writer
is its own process (this file run with ``--worker``): it opens ``LogManager("s3://...")``,
says it is ready, and on the word appends one encoded batch of ``--records`` 100-byte
records per ``append`` in a loop for ``--duration-s``; then reports its appends, its
failed appends (``CommitConflictError``: 20 lost races in one append), its lost races
(``CommitLog.last_attempts`` - 1 per append), its CPU seconds and its latencies.

Per N it prints: aggregate commits/s; the ratio to one writer's (the peer: N=1, same run);
requests per append by kind (the proxy's counts over the appending phase, opens excluded);
failed appends and lost races per append; p50/p99 append latency; the latency-bound
ceiling next to the measured rate; the CPU used by writers, proxy and S3 server as a share
of the machine's cores; and which bound limits the figure:

* **ceiling**: one writer's appends are sequential round trips (the ``.log`` PUT, then
  the conditional PUT of the commit; every tenth version also a snapshot PUT and the
  hint's GET and PUT), so one writer can do at most ``1 / (round trips x delay)`` appends
  a second. The round trips per append are N=1's requests per append (every request of a
  lone writer's append is on its critical path: they run one after the other). N
  independent writers could do N times that; writers of one commit log cannot, since each
  version has one winner and a loser pays at least one more round trip (its lost create,
  then a GET of the winner's commit) before it tries again.
* **bound**: "latency" when the measured rate is at least 70% of the ceiling; "CPU" when
  the processes measured used at least 80% of the cores; "commit log" when the writers
  lost at least 0.05 races per append (they serialise on one commit log: lost races per
  append say by how much); otherwise "load" (no lost races, little CPU of their own: each
  round trip took longer than the peer's, on a machine other work loads).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from s3_proxy import S3Proxy  # noqa: E402
from s3_server import MotoServer, S3Server, SeaweedServer, seaweed_unavailable  # noqa: E402

from seglog.logstore.bucket.bucket_manager import BucketLogManager  # noqa: E402
from seglog.logstore.errors import CommitConflictError  # noqa: E402
from seglog.logstore.manager.log_manager import LogManager  # noqa: E402
from seglog.logstore.records.record_codec import encode_batches  # noqa: E402

TS = 1_700_000_000_000
VALUE_BYTES = 100
LATENCY_BOUND_SHARE = 0.7
CPU_BOUND_SHARE = 0.8
LOST_RACES_BOUND = 0.05
"""Lost races per append from which the writers are said to serialise on a commit log."""


# -- one writer process ----------------------------------------------------------------


def _batch(records: int) -> bytearray:
    values = pa.array([b"%0*d" % (VALUE_BYTES, i) for i in range(records)])
    return encode_batches(values, None, pa.array([TS + i for i in range(records)], pa.int64()))


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(uri: str, topic: str, duration_s: float, records: int) -> None:
    """Run one writer (stdin/stdout lines: ``ready``, ``go``, the result as JSON, ``exit``)."""
    batch = _batch(records)
    mgr = LogManager(uri)
    if not isinstance(mgr, BucketLogManager):
        raise SystemExit(f"{uri}: not a bucket log dir")
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    appends = failed = lost = 0
    latencies: list[float] = []
    cpu0 = _cpu_s()
    start = time.monotonic()
    while time.monotonic() - start < duration_s:
        t0 = time.monotonic()
        try:
            mgr.append(topic, 0, batch)
        except CommitConflictError:
            failed += 1
        else:
            appends += 1
            latencies.append(time.monotonic() - t0)
        lost += max(mgr.commits.last_attempts - 1, 0)
    elapsed = time.monotonic() - start
    result = {
        "appends": appends,
        "failed": failed,
        "lost_races": lost,
        "elapsed_s": elapsed,
        "cpu_s": _cpu_s() - cpu0,
        "latencies": latencies,
    }
    print(json.dumps(result), flush=True)
    sys.stdin.readline()  # "exit": the parent read the proxy's counts first
    mgr.close()


# -- the driver --------------------------------------------------------------------------


@dataclass
class Run:
    label: str
    writers: int
    appends: int
    failed: int
    lost_races: int
    wall_s: float
    requests: Counter[str]
    latencies: list[float]
    cpu_share: float
    per_writer: list[int]
    """Each writer's appends (starvation shows as a writer far below the others)."""

    @property
    def rate(self) -> float:
        return self.appends / self.wall_s

    def per_append(self) -> dict[str, float]:
        return {k: v / max(self.appends, 1) for k, v in sorted(self.requests.items())}

    def round_trips(self) -> float:
        return sum(self.requests.values()) / max(self.appends, 1)


def _server_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def run_writers(
    label: str,
    topics: list[str],
    uri: str,
    env: dict[str, str],
    proxy: S3Proxy,
    server: S3Server,
    args: argparse.Namespace,
) -> Run:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                uri,
                topic,
                str(args.duration_s),
                str(args.records),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for topic in topics
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{label}: a writer did not start (exit {p.wait()})")
        before = proxy.counts
        cpu0 = _cpu_s() + _server_cpu_s(server.pid)
        start = time.monotonic()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            assert p.stdout is not None
            results.append(json.loads(p.stdout.readline()))
        wall = time.monotonic() - start
        requests = proxy.counts
        requests.subtract(before)
        cpu = _cpu_s() + _server_cpu_s(server.pid) - cpu0 + sum(r["cpu_s"] for r in results)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("exit\n")
            p.stdin.flush()
        for p in procs:
            p.wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return Run(
        label,
        len(topics),
        sum(r["appends"] for r in results),
        sum(r["failed"] for r in results),
        sum(r["lost_races"] for r in results),
        wall,
        +requests,
        [x for r in results for x in r["latencies"]],
        cpu / (wall * (os.cpu_count() or 1)),
        [r["appends"] for r in results],
    )


def _pct(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def report(runs: list[Run], delay_s: float) -> None:
    peer = runs[0]
    trips = peer.round_trips()
    one_ceiling = 1 / (trips * delay_s) if delay_s > 0 else float("inf")
    print(
        f"peer: 1 writer, {peer.rate:.1f} commits/s, {trips:.2f} sequential round trips "
        f"per append -> ceiling {one_ceiling:.1f} commits/s per writer at "
        f"{delay_s * 1000:.0f} ms"
    )
    for run in runs:
        ceiling = one_ceiling * run.writers
        if run.rate >= LATENCY_BOUND_SHARE * ceiling:
            bound = "latency"
        elif run.cpu_share >= CPU_BOUND_SHARE:
            bound = "CPU"
        elif run.lost_races / max(run.appends, 1) >= LOST_RACES_BOUND:
            bound = "commit log"
        else:
            # No lost races and little CPU of its own: slower round trips than the peer's
            # (a loaded machine's scheduling, the proxy and server serving N at once).
            bound = "load"
        kinds = " ".join(f"{k}={v:.2f}" for k, v in run.per_append().items())
        print(
            f"{run.label:>12}: {run.rate:6.1f} commits/s  x{run.rate / peer.rate:4.2f} of one "
            f"writer  ceiling {ceiling:6.1f}  bound {bound:<10}  failed {run.failed}  "
            f"lost races/append {run.lost_races / max(run.appends, 1):.2f}  "
            f"p50 {_pct(run.latencies, 50) * 1000:.0f} ms  p99 "
            f"{_pct(run.latencies, 99) * 1000:.0f} ms  cpu {run.cpu_share:.0%} of "
            f"{os.cpu_count()} cores"
        )
        print(f"{'':>14}requests/append {run.round_trips():.2f}: {kinds}")
        if run.writers > 1:
            print(
                f"{'':>14}appends per writer: min {min(run.per_writer)}, max "
                f"{max(run.per_writer)} ({sorted(run.per_writer)})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--writers",
        type=int,
        nargs="*",
        default=[1, 2, 4, 8, 16],
        help="N writers, each to its own topic (the first N is the peer)",
    )
    parser.add_argument(
        "--shared", type=int, nargs="*", default=[2, 4], help="M writers into one shared topic"
    )
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--records", type=int, default=10, help="records per append")
    parser.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    parser.add_argument(
        "--quick", action="store_true", help="--writers 1 2 --shared 2 --duration-s 3"
    )
    parser.add_argument(
        "--worker",
        nargs=4,
        metavar=("URI", "TOPIC", "DURATION_S", "RECORDS"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.worker:
        uri, topic, duration, records = args.worker
        worker(uri, topic, float(duration), int(records))
        return
    if args.quick:
        args.writers, args.shared, args.duration_s = [1, 2], [2], 3.0
    if not args.writers or args.writers[0] != 1:
        parser.error("--writers: the first N must be 1 (the peer every ratio is against)")

    use_seaweed = args.server == "seaweedfs" or (
        args.server == "auto" and seaweed_unavailable() is None
    )
    server: MotoServer | SeaweedServer = SeaweedServer() if use_seaweed else MotoServer()
    with server, S3Proxy(server.endpoint, delay_s=args.delay_ms / 1000) as proxy:
        bucket = server.create_bucket("scaling")
        uri = f"s3://{bucket}/logs"
        env = {**os.environ, **server.env, "AWS_ENDPOINT_URL": proxy.endpoint}
        os.environ.update(env)
        with LogManager(uri) as admin:
            for i in range(max(args.writers)):
                admin.create_topic(f"t{i}", 1)
            admin.create_topic("shared", 1)
        print(
            f"{'SeaweedFS' if use_seaweed else 'moto'} behind the proxy, "
            f"{args.delay_ms:.0f} ms per request; {args.duration_s:.0f} s per run; "
            f"{args.records} records of {VALUE_BYTES} B per append; "
            f"load {os.getloadavg()[0]:.1f}"
        )
        runs = [
            run_writers(
                f"{n} topic{'s' if n > 1 else ''}",
                [f"t{i}" for i in range(n)],
                uri,
                env,
                proxy,
                server,
                args,
            )
            for n in args.writers
        ]
        runs += [
            run_writers(f"{m} -> shared", ["shared"] * m, uri, env, proxy, server, args)
            for m in args.shared
        ]
        report(runs, args.delay_ms / 1000)


if __name__ == "__main__":
    main()
