"""Where a bucket micro-batch's steps spend their time above their round trips (issue 25,
goal 4), Spark-free: each step of a seglog -> seglog micro-batch called in a loop, timed
and split between the caller, the client, the proxy and the server.

Run: ``python benchmarks/bench_bucket_step_cpu.py [--calls 120] [--delay-ms 25]
[--profile STEP] [--server auto|seaweedfs|moto]``

An S3 server (``tests/s3_server.py``) behind ``tests/s3_proxy.py`` (``--delay-ms``
before each request), two log dirs in one bucket (``in``, ``out``), each role with its
own manager as under Spark. Each of ``--calls`` micro-batches runs its steps one after
the other, in this process: ``publish`` (one ``append_many`` of one record on the
producer's ``BucketLogManager``), ``latestOffset`` (the Spark source's reader, then its
``reportLatestOffset`` and ``partitions`` with their read plans), ``read`` (the planned
read task, ``read_input_partition``, in this process), ``write`` (the sink task:
``sink_bucket_staging.stage_rows`` of those rows with the driver's view) and ``commit``
(the driver's ``sink_bucket_commit.commit``).

Printed per step, medians over the calls after the first ``SKIP`` (ms):

- ``wall``; ``trips`` and ``reqs``, its sequential round trips and requests
  (``s3_proxy.sequential_round_trips``); ``above`` = wall - trips x delay;
- ``spread``: from the first request's arrival at the proxy to the last's (requests made
  at once: how late the last one was sent, a thread hand-off's cost);
- over the chain of sequential requests: ``pre-fwd``, the proxy's time from a request's
  arrival to its forwarding beyond its delay; ``answer``, forwarded to the answer's head
  (the server's time, and the local sockets'); ``client`` = wall - the chain's time in
  the proxy (the caller's Python, the client, the sockets, waits on other threads);
- CPU: ``thread``, the caller's thread (``time.thread_time``: seglog's Python and the
  client's calls); ``rest``, the rest of this process's beside the proxy's (the client's
  runtime threads, seglog's pools); ``proxy``, the proxy's threads
  (``pthread_getcpuclockid``; a mean); ``server``, the server process's (``/proc``, in
  10 ms ticks: a mean).

Then the connections the proxy accepted for all the requests (the client's reuse).
``--profile STEP`` prints that step's cProfile (its calls after the first ``SKIP``,
cumulative, top 35, then by own time, top 20). ``--delay-ms 0`` shows the steps' cost
without the wait.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "tests"))

from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: E402
from s3_proxy import RequestRecord, S3Proxy, sequential_round_trips  # noqa: E402
from s3_server import MotoServer, SeaweedServer, seaweed_unavailable  # noqa: E402

from seglog.datasource.schema import source_schema  # noqa: E402
from seglog.datasource.stream_reader import SeglogStreamReader, read_input_partition  # noqa: E402
from seglog.logstore.bucket.bucket_manager import BucketLogManager  # noqa: E402
from seglog.logstore.manager.log_manager import LogManager  # noqa: E402
from seglog.logstore.records.record_codec import encode_batches  # noqa: E402
from seglog.streaming import sink_view  # noqa: E402
from seglog.streaming.sink_bucket_commit import bucket_writer, commit  # noqa: E402
from seglog.streaming.sink_bucket_merger import wait_all  # noqa: E402
from seglog.streaming.sink_bucket_staging import stage_rows  # noqa: E402
from seglog.streaming.sink_options import SinkColumns, SinkOptions  # noqa: E402

STEPS = ("publish", "latestOffset", "read", "write", "commit")
SKIP = 3
COLUMNS = (
    "wall",
    "trips",
    "reqs",
    "above",
    "spread",
    "pre-fwd",
    "answer",
    "client",
    "thread",
    "rest",
    "proxy",
    "server",
)
MEANS = ("proxy", "server")  # CPU clocks of a 10 ms tick (the server's): means, not medians


def _proc_cpu_s(pid: int) -> float:
    """A process's CPU seconds (user + system), from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proxy_cpu_s() -> float:
    """The CPU seconds of the proxy's live threads (a closed connection's are lost:
    connections are kept alive, so they are few)."""
    total = 0.0
    for t in threading.enumerate():
        if t.name.startswith("s3-proxy") and t.ident is not None:
            try:
                total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except OSError:
                continue  # ended meanwhile
    return total


def _chain(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The requests ``sequential_round_trips`` counts: each after the last one's answer."""

    def end(r: RequestRecord) -> float:
        return r.replied if r.replied is not None else r.answered

    out: list[RequestRecord] = []
    last = float("-inf")
    for r in sorted(records, key=end):
        if r.arrived >= last:
            out.append(r)
            last = end(r)
    return out


class Meter:
    """Each step's figures per call, and its cProfile if asked."""

    def __init__(self, proxy: S3Proxy, server_pid: int | None, delay_s: float, profile: str | None):
        self.proxy = proxy
        self.server_pid = server_pid
        self.delay_s = delay_s
        self.profile = profile
        self.profiler = cProfile.Profile()
        self.rows: dict[str, list[dict[str, float]]] = {s: [] for s in STEPS}

    def __call__(self, name: str, call: Callable[[], Any], record: bool) -> Any:
        server0 = _proc_cpu_s(self.server_pid) if self.server_pid else 0.0
        proxy0 = _proxy_cpu_s()
        since = self.proxy.clock()
        profiling = record and self.profile == name
        p0 = time.process_time()
        t0 = time.thread_time()
        w0 = time.perf_counter()
        if profiling:
            self.profiler.enable()
        result = call()
        if profiling:
            self.profiler.disable()
        wall = time.perf_counter() - w0
        thread = time.thread_time() - t0
        process = time.process_time() - p0
        until = self.proxy.clock()
        proxy = _proxy_cpu_s() - proxy0
        server = (_proc_cpu_s(self.server_pid) - server0) if self.server_pid else 0.0
        made = [
            r for r in self.proxy.requests(since) if r.replied is not None and r.replied < until
        ]
        chain = _chain(made)
        in_proxy = sum((r.replied or r.answered) - r.arrived for r in chain)
        forwarded = [r for r in chain if r.forwarded is not None and r.replied is not None]
        pre_fwd = sum((r.forwarded or 0.0) - r.arrived - self.delay_s for r in forwarded)
        answer = sum((r.replied or 0.0) - (r.forwarded or 0.0) for r in forwarded)
        if record:
            self.rows[name].append(
                {
                    "wall": wall * 1e3,
                    "trips": sequential_round_trips(made),
                    "reqs": len(made),
                    "above": (wall - len(chain) * self.delay_s) * 1e3,
                    "spread": (max(r.arrived for r in made) - min(r.arrived for r in made)) * 1e3
                    if made
                    else 0.0,
                    "pre-fwd": pre_fwd * 1e3,
                    "answer": answer * 1e3,
                    "client": (wall - in_proxy) * 1e3,
                    "thread": thread * 1e3,
                    "rest": (process - thread - proxy) * 1e3,
                    "proxy": proxy * 1e3,
                    "server": server * 1e3,
                }
            )
        return result

    def report(self) -> None:
        print(
            f"  {'step':>12}  "
            + "  ".join(f"{c:>8}" for c in COLUMNS)
            + "   (ms: medians; proxy, server: means)"
        )
        for name in STEPS:
            rows = self.rows[name]
            print(
                f"  {name:>12}  "
                + "  ".join(f"{_average(c, [r[c] for r in rows]):8.2f}" for c in COLUMNS)
            )
        if self.profile is not None:
            out = io.StringIO()
            stats = pstats.Stats(self.profiler, stream=out)
            stats.sort_stats("cumulative").print_stats(35)
            stats.sort_stats("tottime").print_stats(20)
            print(out.getvalue())


def _read(partitions: list[Any]) -> pa.Table:
    """A read task's rows, as a table (its planned reads, in this process)."""
    return pa.Table.from_batches([b for p in partitions for b in read_input_partition(p)])


def _average(column: str, values: list[float]) -> float:
    return statistics.fmean(values) if column in MEANS else statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=120)
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    parser.add_argument("--profile", choices=STEPS)
    args = parser.parse_args()
    use_seaweed = args.server == "seaweedfs" or (
        args.server == "auto" and seaweed_unavailable() is None
    )
    server: MotoServer | SeaweedServer = SeaweedServer() if use_seaweed else MotoServer()
    delay_s = args.delay_ms / 1000
    with server, S3Proxy(server.endpoint, delay_s=delay_s, log_requests=True) as proxy:
        os.environ.update({**server.env, "AWS_ENDPOINT_URL": proxy.endpoint})
        bucket = server.create_bucket("steps")
        in_dir, out_dir = f"s3://{bucket}/in", f"s3://{bucket}/out"
        for log_dir, topic in ((in_dir, "in"), (out_dir, "out")):
            with LogManager(log_dir) as mgr:
                mgr.create_topic(topic, 1, {"retention.ms": -1})
        server_pid = server.pid
        meter = Meter(proxy, server_pid, delay_s, args.profile)
        opts = SinkOptions.parse({"path": out_dir, "topic": "out"})
        producer = BucketLogManager(in_dir)
        source_opts = {"path": in_dir, "subscribe": "in"}
        source = SeglogStreamReader(source_opts, source_schema(source_opts))
        offsets = source.initialOffset()

        def publish() -> None:
            producer.append_many({("in", 0): encode_batches(pa.array([b"%d" % time.time_ns()]))})

        def look() -> tuple[dict[str, Any], list[Any]]:
            end = source.latestOffset(offsets, ReadAllAvailable())
            source.reportLatestOffset()
            return end, source.partitions(offsets, end)

        for call in range(args.calls + SKIP):
            record = call >= SKIP
            meter("publish", publish, record)
            end, partitions = meter("latestOffset", look, record)
            rows = meter("read", partial(_read, partitions), record)
            assert rows.num_rows == end["in"]["0"] - offsets["in"]["0"], (rows, end)
            columns = SinkColumns.resolve(rows.schema, default_topic="out")
            view = sink_view.driver_view(opts, all_topics=False)
            sink_view.wait_refreshes()  # off the micro-batch's path under Spark
            task = partial(
                stage_rows, opts, columns, rows.to_batches(), "steps", call, 0, 0, view=view
            )
            staged = meter("write", task, record)
            meter("commit", partial(commit, [staged], call, opts), record)
            producer.commits.flush_snapshots()  # off the path: not in the next step
            bucket_writer(opts).commits.flush_snapshots()
            offsets = end
        wait_all(60.0)  # the sink's background merges, before the proxy goes
        producer.close()
        everything = proxy.requests()
    print(
        f"{'SeaweedFS' if use_seaweed else 'moto'} at {args.delay_ms:g} ms a request, "
        f"{args.calls} micro-batches of 1 record; load {os.getloadavg()[0]:.1f}"
    )
    meter.report()
    print(
        f"  {len(everything)} requests on {len({r.connection for r in everything})} "
        "connections (the whole run, setup included)"
    )


if __name__ == "__main__":
    main()
