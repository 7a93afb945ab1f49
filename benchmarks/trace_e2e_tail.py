"""Where the slowest records of a seglog -> seglog streaming query on a bucket lose their
time (issue 25, goal 4's tail): ``bench_e2e_latency.py``'s bucket case, traced.

Run: ``python benchmarks/trace_e2e_tail.py [--duration-s 30] [--interval-ms 100]
[--delay-ms 25] [--server auto|seaweedfs|moto] [--slowest 5] [--conf KEY=VALUE ...]
[--sink-option KEY=VALUE ...] [--save FILE.json] [--load FILE.json]``

The same query as the latency benchmark's bucket case (topic ``in`` of one log dir to
topic ``out`` of another in one bucket, behind ``tests/s3_proxy.py`` at ``--delay-ms``
per request; ``processingTime`` 0; ``local[2]``; a producer appending one record every
``--interval-ms`` with ``append_many``; a reader tailing ``out``), with everything
timed: the producer's call per record (and the offset it got), every look of the
reader (and the high watermark it found), every micro-batch's progress (its start and
phases, and the offsets it read), and every request the proxy forwarded (its target and
status, ``log_requests``). After the run, the commits of both topic logs are read back
(``operation``: a sink's ``append`` or the merger's ``merge``) and matched to the
conditional PUT that created each.

Printed: per record, the latency split into the producer's publish, the wait for the
trigger that read it (its ``latestOffset`` started after the publish), the micro-batch
until the sink's commit landed in ``out``'s topic log, and the reader's look from then
until it saw the record; the mean of each part for the slowest ``--slowest`` percent
against all records; and for each of those slow records what happened meanwhile, with
the requests told apart by role (``Roles``: by connection, as each manager has a client
of its own): the producer's publish, the query's requests in its micro-batch and the one
before (round trips, lost creates, snapshots, commits read, Spark's phases), the
background merger's, the reader's. ``--save`` keeps the run's trace; ``--load`` analyses
a saved one again without Spark.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "tests"))

import pyarrow as pa  # noqa: E402
from s3_proxy import RequestRecord, S3Proxy, sequential_round_trips  # noqa: E402
from s3_server import MotoServer, SeaweedServer, seaweed_unavailable  # noqa: E402

from seglog.logstore.manager.log_manager import LogManager  # noqa: E402
from seglog.logstore.records.record_codec import decode_batches, encode_batches  # noqa: E402

WARMUP_S = 3.0
POLL_S = 0.005


@dataclass
class Produced:
    offset: int
    produced_ns: int
    published_ns: int


@dataclass
class Look:
    started_ns: int
    ended_ns: int
    high_watermark: int


@dataclass
class Trace:
    produced: list[Produced] = field(default_factory=list)
    seen_ns: dict[int, int] = field(default_factory=dict)  # produced ns -> when seen
    looks: list[Look] = field(default_factory=list)
    warm_ns: int = 2**63 - 1


@dataclass
class Batch:
    batch_id: int
    start_ns: int
    durations: dict[str, int]
    start_offset: int
    end_offset: int

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.durations.get("triggerExecution", 0) * 1_000_000


@dataclass
class Commit:
    """A commit of a topic log, and when the create that made it was answered."""

    log: str  # "in" or "out"
    version: int
    operation: str
    landed_ns: int


# -- running --------------------------------------------------------------------------


def _record(ns: int) -> bytearray:
    return encode_batches(pa.array([b"%d" % ns]), None, pa.array([ns // 1_000_000], pa.int64()))


def _produce(writer: LogManager, trace: Trace, stop: threading.Event, interval_s: float) -> None:
    next_at = time.monotonic()
    while not stop.is_set():
        ns = time.time_ns()
        info = writer.append_many({("in", 0): _record(ns)})[("in", 0)]
        trace.produced.append(Produced(info.first_offset, ns, time.time_ns()))
        next_at += interval_s
        stop.wait(max(0.0, next_at - time.monotonic()))


def _tail(reader: LogManager, trace: Trace, stop: threading.Event) -> None:
    pos = 0
    while not stop.is_set():
        t0 = time.time_ns()
        hw = reader.high_watermarks().get(("out", 0), 0)
        trace.looks.append(Look(t0, time.time_ns(), hw))
        if hw > pos:
            for chunk in reader.get_log("out", 0).read_chunks(pos, hw):
                now = time.time_ns()
                for value in decode_batches(chunk, start_offset=pos).column("value").to_pylist():
                    trace.seen_ns[int(value)] = now
            pos = hw
        stop.wait(POLL_S)


def _offset(raw: Any) -> int:
    """The seglog source's end offset of partition ``in``-0 in a progress event."""
    if raw is None:
        return 0
    parsed = json.loads(raw) if isinstance(raw, str) else raw
    if not parsed:
        return 0
    return int(parsed["in"]["0"])


def _batches(progress: Iterable[dict[str, Any]]) -> list[Batch]:
    out = []
    for p in progress:
        if not p["sources"]:
            continue
        src = p["sources"][0]
        start = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00"))
        out.append(
            Batch(
                p["batchId"],
                int(start.timestamp() * 1e9),
                dict(p["durationMs"]),
                _offset(src.get("startOffset")),
                _offset(src.get("endOffset")),
            )
        )
    return out


def _commits(uri: str, log: str, requests: list[RequestRecord], to_wall: float) -> list[Commit]:
    """The commits of ``uri``'s one topic log, each with when its create landed."""
    from seglog.logstore.storage.object_storage import ObjectStorage

    storage = ObjectStorage(uri)
    topics = [e.name for e in storage.list_dir("_seglog/topics")]
    assert len(topics) == 1, topics
    prefix = f"_seglog/topics/{topics[0]}/log"
    landed = {
        r.target.split("?")[0].rsplit("/", 1)[-1]: r.replied or r.answered
        for r in requests
        if r.kind == "CONDITIONAL_PUT" and r.status == 200 and f"/{log}/" in r.target
    }
    out = []
    for entry in storage.list_dir(prefix):
        body = json.loads(storage.read(f"{prefix}/{entry.name}"))
        when = landed.get(entry.name)
        if when is not None:
            out.append(Commit(log, body["version"], body["operation"], int((when + to_wall) * 1e9)))
    return sorted(out, key=lambda c: c.landed_ns)


def run(spark: Any, bucket: str, proxy: S3Proxy, work: Path, args: argparse.Namespace) -> None:
    in_dir, out_dir = f"s3://{bucket}/in", f"s3://{bucket}/out"
    for log_dir, topic in ((in_dir, "in"), (out_dir, "out")):
        with LogManager(log_dir) as mgr:
            mgr.create_topic(topic, 1, {"retention.ms": -1})
    writer = LogManager(in_dir)
    reader = LogManager(out_dir, read_only=True)
    trace = Trace()
    stop = threading.Event()
    stream = (
        spark.readStream.format("seglog")
        .option("path", in_dir)
        .option("subscribe", "in")
        .load()
        .writeStream.format("seglog")
        .option("path", out_dir)
        .option("topic", "out")
        .option("checkpointLocation", str(work / "chk"))
        .trigger(processingTime="0 seconds")
    )
    for key, value in args.sink_option:
        stream = stream.option(key, value)
    query = stream.start()
    threads = [
        threading.Thread(target=_produce, args=(writer, trace, stop, args.interval_ms / 1000)),
        threading.Thread(target=_tail, args=(reader, trace, stop)),
    ]
    to_wall = time.time() - proxy.clock()
    try:
        for t in threads:
            t.start()
        while not any(p["numInputRows"] > 0 for p in query.recentProgress):
            if query.exception() is not None:
                raise RuntimeError(f"the query failed: {query.exception()}")
            time.sleep(0.2)
        time.sleep(WARMUP_S)
        trace.warm_ns = time.time_ns()
        time.sleep(args.duration_s)
    finally:
        stop.set()
        for t in threads:
            t.join()
        progress = list(query.recentProgress)
        query.stop()
        writer.close()
        reader.close()
    requests = proxy.requests()
    commits = _commits(in_dir, "in", requests, to_wall) + _commits(
        out_dir, "out", requests, to_wall
    )
    if args.save:
        Path(args.save).write_text(
            json.dumps(
                {
                    "trace": asdict(trace),
                    "progress": progress,
                    "commits": [asdict(c) for c in commits],
                    "requests": [asdict(r) for r in requests],
                    "to_wall": to_wall,
                },
                default=str,  # the progress' run ids
            )
        )
    analyse(trace, _batches(progress), commits, requests, to_wall, args)


def load(path: str, args: argparse.Namespace) -> None:
    """Analyse a run saved by ``--save`` again (no Spark, no server)."""
    raw = json.loads(Path(path).read_text())
    t = raw["trace"]
    trace = Trace(
        [Produced(**p) for p in t["produced"]],
        {int(k): v for k, v in t["seen_ns"].items()},
        [Look(**lk) for lk in t["looks"]],
        t["warm_ns"],
    )
    analyse(
        trace,
        _batches(raw["progress"]),
        [Commit(**c) for c in raw["commits"]],
        [RequestRecord(**r) for r in raw["requests"]],
        raw["to_wall"],
        args,
    )


# -- analysis -------------------------------------------------------------------------


@dataclass
class Parts:
    produced: Produced
    batch: Batch | None
    landed_ns: int  # when the sink's commit that made it visible landed in out's log
    seen_ns: int

    @property
    def latency_ms(self) -> float:
        return (self.seen_ns - self.produced.produced_ns) / 1e6

    def split(self) -> dict[str, float]:
        p = self.produced
        start = self.batch.start_ns if self.batch else p.published_ns
        return {
            "publish": (p.published_ns - p.produced_ns) / 1e6,
            "wait": (start - p.published_ns) / 1e6,
            "batch": (self.landed_ns - start) / 1e6,
            "look": (self.seen_ns - self.landed_ns) / 1e6,
        }


SPLIT = ("publish", "wait", "batch", "look")
PHASES = ("latestOffset", "walCommit", "queryPlanning", "addBatch", "commitOffsets")


class Roles:
    """Whose each request was, by its connection: the producer's (it created commits of
    ``in``), the reader's (it LISTed ``out`` in a loop), the merger's (it uploaded a merged
    segment); the rest is the query's (the source's planning, its tasks, the sink's tasks
    and commit). Each manager has a client, so connections of its own."""

    def __init__(self, requests: list[RequestRecord]) -> None:
        self.producer = {
            r.connection
            for r in requests
            if r.kind == "CONDITIONAL_PUT" and "/in/_seglog/topics/" in r.target
        }
        looks = Counter(r.connection for r in requests if r.kind == "LIST" and "out%2F" in r.target)
        self.reader = {c for c, n in looks.items() if n > 100}
        self.merger = {
            r.connection for r in requests if r.kind == "PUT" and "/out/out-0/" in r.target
        }

    def of(self, r: RequestRecord) -> str:
        if r.connection in self.producer:
            return "producer"
        if r.connection in self.reader:
            return "reader"
        return "merger" if r.connection in self.merger else "query"


def _in_window(
    requests: list[RequestRecord], lo_ns: int, hi_ns: int, to_wall: float
) -> list[RequestRecord]:
    return [r for r in requests if lo_ns <= (r.arrived + to_wall) * 1e9 < hi_ns]


def _describe(reqs: list[RequestRecord]) -> str:
    """Round trips, and whatever is not a steady step's: lost creates (412), snapshots,
    the turn, 5xx."""
    words = [f"{len(reqs)} requests, {sequential_round_trips(reqs)} round trips"]
    for what, hit in (
        ("lost creates", lambda r: r.kind == "CONDITIONAL_PUT" and r.status == 412),
        ("snapshot PUTs", lambda r: r.kind == "PUT" and "/snapshots/" in r.target),
        ("commit GETs", lambda r: r.kind == "GET" and "/log/" in r.target),
        ("turn requests", lambda r: r.target.endswith("/turn")),
        ("5xx", lambda r: r.status is not None and r.status >= 500),
    ):
        n = sum(1 for r in reqs if hit(r))
        if n:
            words.append(f"{n} {what}")
    return ", ".join(words)


def _phases(b: Batch) -> str:
    return ", ".join(f"{k} {b.durations.get(k, 0)}" for k in (*PHASES, "triggerExecution"))


def _after_merges(
    batches: list[Batch],
    merges: list[Commit],
    sink_commits: list[Commit],
    query: list[RequestRecord],
    to_wall: float,
) -> None:
    """The micro-batch whose commit is the sink's first after each merge, against the
    median micro-batch: its round trips (the query's requests), addBatch and trigger."""

    def trips(b: Batch) -> int:
        return sequential_round_trips(_in_window(query, b.start_ns, b.end_ns, to_wall))

    after = []
    for m in merges:
        first = next((c for c in sink_commits if c.landed_ns > m.landed_ns), None)
        if first is not None:
            after += [b for b in batches if b.start_ns <= first.landed_ns <= b.end_ns][:1]
    others = [b for b in batches if b not in after and b.end_offset > b.start_offset]
    if not after or not others:
        return
    print(
        f"  median micro-batch: {statistics.median(trips(b) for b in others):.0f} round trips, "
        f"addBatch {statistics.median(b.durations.get('addBatch', 0) for b in others):.0f}, "
        f"trigger {statistics.median(b.durations.get('triggerExecution', 0) for b in others):.0f}"
        " ms; the one after each merge: "
        + "; ".join(
            f"{b.batch_id}: {trips(b)} round trips, addBatch {b.durations.get('addBatch', 0)}, "
            f"trigger {b.durations.get('triggerExecution', 0)} ms"
            for b in after
        )
    )


def analyse(
    trace: Trace,
    batches: list[Batch],
    commits: list[Commit],
    requests: list[RequestRecord],
    to_wall: float,
    args: argparse.Namespace,
) -> None:
    roles = Roles(requests)
    query = [r for r in requests if roles.of(r) == "query"]
    producer = [r for r in requests if roles.of(r) == "producer"]
    reader = [r for r in requests if roles.of(r) == "reader"]
    merger = [r for r in requests if roles.of(r) == "merger"]
    sink_commits = [c for c in commits if c.log == "out" and c.operation != "merge"]
    merges = [c for c in commits if c.log == "out" and c.operation == "merge"]
    parts: list[Parts] = []
    for p in trace.produced:
        if p.produced_ns < trace.warm_ns or p.produced_ns not in trace.seen_ns:
            continue
        batch = next((b for b in batches if b.start_offset <= p.offset < b.end_offset), None)
        seen = trace.seen_ns[p.produced_ns]
        start = batch.start_ns if batch else p.published_ns
        landed = next((c.landed_ns for c in sink_commits if c.landed_ns >= start), seen)
        parts.append(Parts(p, batch, min(landed, seen), seen))
    if len(parts) < 20:
        print(f"only {len(parts)} records seen: nothing to say")
        return
    parts.sort(key=lambda x: x.latency_ms)
    q = statistics.quantiles([x.latency_ms for x in parts], n=100, method="inclusive")
    slow = parts[-max(1, round(len(parts) * args.slowest / 100)) :]
    with_rows = [b for b in batches if b.end_offset > b.start_offset]
    lost = [r for r in requests if r.kind == "CONDITIONAL_PUT" and r.status == 412]
    print(
        f"{len(parts)} records: latency p50 {q[49]:.0f}  p90 {q[89]:.0f}  p99 {q[98]:.0f} ms; "
        f"{len(batches)} micro-batches ({len(with_rows)} with rows); sink commits "
        f"{len(sink_commits)}, merges {len(merges)}; lost creates: "
        + ", ".join(
            f"{who} {sum(roles.of(r) == who for r in lost)}"
            for who in ("producer", "query", "merger")
        )
    )
    for name, group in (("all", parts), (f"slowest {len(slow)}", slow)):
        means = {k: statistics.mean(x.split()[k] for x in group) for k in SPLIT}
        print(
            f"  {name:>12}: {statistics.mean(x.latency_ms for x in group):5.0f} ms = "
            + " + ".join(f"{k} {means[k]:.0f}" for k in SPLIT)
        )
    print(
        "  micro-batches with rows (ms means): "
        + ", ".join(
            f"{k} {statistics.mean(b.durations.get(k, 0) for b in with_rows):.0f}"
            for k in (*PHASES, "triggerExecution")
        )
    )
    _after_merges(batches, merges, sink_commits, query, to_wall)
    print("  the slowest records (the query's requests only, unless said):")
    for x in reversed(slow):
        s, b, p = x.split(), x.batch, x.produced
        print(
            f"    offset {p.offset}: {x.latency_ms:.0f} ms = "
            + " + ".join(f"{k} {s[k]:.0f}" for k in SPLIT)
        )
        print(
            "      publish (producer's): "
            + _describe(_in_window(producer, p.produced_ns, p.published_ns, to_wall))
        )
        if b is not None:
            before = [c for c in batches if c.end_ns <= b.start_ns]
            if before:
                pb = before[-1]
                print(
                    f"      batch before, {pb.batch_id} ({pb.end_offset - pb.start_offset} "
                    f"rows): {_phases(pb)}; "
                    + _describe(_in_window(query, pb.start_ns, pb.end_ns, to_wall))
                )
            print(
                f"      its batch, {b.batch_id} ({b.end_offset - b.start_offset} rows): "
                f"{_phases(b)}; until its commit: "
                + _describe(_in_window(query, b.start_ns, x.landed_ns, to_wall))
            )
        during = _in_window(merger, p.produced_ns, x.seen_ns, to_wall)
        print(
            f"      merger meanwhile: {_describe(during) if during else 'idle'}; reader from "
            f"the commit: " + _describe(_in_window(reader, x.landed_ns, x.seen_ns, to_wall))
        )


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise SystemExit(f"{item!r}: expected KEY=VALUE")
    return key.strip(), value.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--interval-ms", type=float, default=100.0)
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--slowest", type=float, default=5.0, help="percent of records")
    parser.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    parser.add_argument("--conf", type=_pair, action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--sink-option", type=_pair, action="append", default=[], metavar="KEY=VALUE"
    )
    parser.add_argument("--save", help="also write the run's trace to this JSON file")
    parser.add_argument("--load", help="analyse a trace --save wrote instead of running")
    args = parser.parse_args()
    if args.load:
        load(args.load, args)
        return

    from pyspark.sql import SparkSession

    from seglog.datasource import SeglogDataSource

    use_seaweed = args.server == "seaweedfs" or (
        args.server == "auto" and seaweed_unavailable() is None
    )
    server: MotoServer | SeaweedServer = SeaweedServer() if use_seaweed else MotoServer()
    with (
        tempfile.TemporaryDirectory() as tmp,
        server,
        S3Proxy(server.endpoint, delay_s=args.delay_ms / 1000, log_requests=True) as proxy,
    ):
        os.environ.update({**server.env, "AWS_ENDPOINT_URL": proxy.endpoint})
        builder = (
            SparkSession.builder.master("local[2]")
            .appName("trace-e2e-tail")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        )
        for key, value in args.conf:
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.dataSource.register(SeglogDataSource)
        print(
            f"{'SeaweedFS' if use_seaweed else 'moto'} at {args.delay_ms:.0f} ms a request; "
            f"{args.duration_s:.0f} s; load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        try:
            run(spark, server.create_bucket("e2e"), proxy, Path(tmp), args)
        finally:
            spark.stop()
        print(f"  (load {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
