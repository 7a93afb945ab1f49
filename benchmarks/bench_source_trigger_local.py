"""seglog's own per-micro-batch cost on a local log dir, without Spark: the source's
driver calls and read task while a producer in another process publishes, and the
producer's ``append_many`` (issue 25, goal 4: each is on a record's latency path).

Three kinds of rounds, each in its own process:

* ``source``: the calls Spark's source runner makes per trigger (``latestOffset``,
  ``reportLatestOffset``, ``partitions``) of one ``SeglogStreamReader``, with a producer
  process appending one record every ``--interval-ms``; beside them, the floor of a
  no-op source's ``latestOffset`` (the no-op source of ``bench_e2e_latency.py`` reads
  one small file: here, the log dir's high-watermark checkpoint, read whole);
* ``read``: a read task of each trigger's range (``read_input_partition``, as a reused
  Python worker runs it: the process's shared reader, its log loaded);
* ``publish``: ``append_many`` of one record, and beside it the floor of a bare ``write``
  + ``fsync`` of the same bytes to a file; with the fsyncs each call issues.

``--peer-src DIR`` names another tree's ``src`` (e.g. ``git archive main`` unpacked):
rounds alternate between the two trees (same disk, same load); medians over all rounds
and the ratio this tree / peer are printed, with each tree's ratio to its floor.

    .venv/bin/python benchmarks/bench_source_trigger_local.py --peer-src /tmp/main/src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_PRODUCER = """
import sys, time
import pyarrow as pa
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
mgr = LogManager([sys.argv[1]])
interval = float(sys.argv[2])
while True:
    ns = time.time_ns()
    data = encode_batches(pa.array([b"%d" % ns]), None, pa.array([ns // 10**6], pa.int64()))
    mgr.append_many({("in", 0): data})
    time.sleep(interval)
"""

Samples = dict[str, list[float]]


def _timer(out: Samples) -> Callable[[str, Callable[[], Any]], Any]:
    def timed(name: str, call: Callable[[], Any]) -> Any:
        w, c = time.perf_counter(), time.process_time()
        result = call()
        out.setdefault(name + " ms", []).append((time.perf_counter() - w) * 1000)
        out.setdefault(name + " cpu ms", []).append((time.process_time() - c) * 1000)
        return result

    return timed


def _with_producer(log_dir: Path, interval_s: float, run: Callable[[], Samples]) -> Samples:
    from seglog.logstore.manager.log_manager import LogManager

    with LogManager([str(log_dir)]) as mgr:
        mgr.create_topic("in", 1, {"retention.ms": -1})
    producer = subprocess.Popen(
        [sys.executable, "-c", _PRODUCER, str(log_dir), str(interval_s)],
        env=dict(os.environ),
    )
    try:
        time.sleep(3.0)  # past the 2 s a fresh directory's listing is not trusted
        return run()
    finally:
        producer.kill()
        producer.wait()


def run_source(log_dir: Path, triggers: int, interval_s: float, read: bool) -> Samples:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from seglog.datasource.data_source import SeglogDataSource
    from seglog.datasource.stream_reader import SeglogStreamReader, read_input_partition

    def run() -> Samples:
        opts = {"path": str(log_dir), "subscribe": "in"}
        r = SeglogStreamReader(opts, SeglogDataSource(opts).schema())
        checkpoint = log_dir / "replication-offset-checkpoint"
        start = r.initialOffset()
        out: Samples = {}
        timed = _timer(out)
        for i in range(triggers + 10):
            step = timed if i >= 10 else (lambda name, call: call())
            end = step("latestOffset", lambda s=start: r.latestOffset(s, ReadAllAvailable()))
            step("reportLatestOffset", r.reportLatestOffset)
            parts = step("partitions", lambda s=start, e=end: r.partitions(s, e))
            step("floor: a no-op source's look", checkpoint.read_bytes)
            if read:
                for p in parts:
                    step("read task", lambda p=p: sum(b.num_rows for b in read_input_partition(p)))
            start = end
            time.sleep(interval_s)
        return {k: v for k, v in out.items() if read == k.startswith("read task")}

    return _with_producer(log_dir, interval_s, run)


def run_publish(log_dir: Path, calls: int) -> Samples:
    import pyarrow as pa

    from seglog.logstore.manager.log_manager import LogManager
    from seglog.logstore.records.record_codec import encode_batches

    real_fsync = os.fsync
    fsyncs = [0.0, 0.0]  # fsyncs of the call, seconds in them

    def counting(fd: int) -> None:
        fsyncs[0] += 1
        t = time.perf_counter()
        real_fsync(fd)
        fsyncs[1] += time.perf_counter() - t

    os.fsync = counting
    out: Samples = {}
    timed = _timer(out)
    floor = os.open(log_dir / "floor", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    with LogManager([str(log_dir / "logs")]) as mgr:
        mgr.create_topic("in", 1, {"retention.ms": -1})
        for i in range(calls + 10):
            ns = time.time_ns()
            data = encode_batches(pa.array([b"%d" % ns]), None, pa.array([ns // 10**6], pa.int64()))
            fsyncs[:] = [0.0, 0.0]
            if i < 10:
                mgr.append_many({("in", 0): data})
                continue
            timed("append_many", lambda d=data: mgr.append_many({("in", 0): d}))
            out.setdefault("append_many fsyncs", []).append(fsyncs[0])
            out.setdefault("append_many in fsync ms", []).append(fsyncs[1] * 1000)
            timed("floor: write + fsync", lambda d=data: (os.write(floor, d), real_fsync(floor)))
    os.close(floor)
    return out


def run_tree(src: str, kind: str, args: argparse.Namespace, work: Path) -> Samples:
    env = dict(os.environ, PYTHONPATH=src)
    with tempfile.TemporaryDirectory(dir=work) as d:
        res = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                kind,
                "--dir",
                d,
                "--triggers",
                str(args.triggers),
                "--interval-ms",
                str(args.interval_ms),
            ],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    result: Samples = json.loads(res.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--triggers", type=int, default=100, help="triggers (or appends) a round")
    ap.add_argument("--interval-ms", type=float, default=100, help="between two appends")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per tree and kind")
    ap.add_argument("--peer-src", help="another tree's src dir: the peer")
    ap.add_argument("--work", default=None, help="where the log dirs go (default: a temp dir)")
    ap.add_argument("--child", choices=("source", "read", "publish"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        d = Path(args.dir)
        if args.child == "publish":
            print(json.dumps(run_publish(d, args.triggers)))
        else:
            interval_s = args.interval_ms / 1000
            print(
                json.dumps(run_source(d / "logs", args.triggers, interval_s, args.child == "read"))
            )
        return
    trees = {"this tree": str(Path(__file__).resolve().parents[1] / "src")}
    if args.peer_src:
        trees["peer"] = args.peer_src
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-source-trigger-"))
    work.mkdir(parents=True, exist_ok=True)
    got: dict[str, Samples] = {name: {} for name in trees}
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    for r in range(args.rounds):
        for kind in ("source", "read", "publish"):
            order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
            for name, src in order:
                for k, v in run_tree(src, kind, args, work).items():
                    got[name].setdefault(k, []).extend(v)
    print(
        f"load after: {os.getloadavg()[0]:.2f}  {args.rounds} rounds of {args.triggers} "
        f"triggers or appends, one partition, a record every {args.interval_ms:g} ms"
    )
    for name, res in got.items():
        print(f"{name}: medians")
        for k, v in res.items():
            print(f"  {k:38s} {statistics.median(v):8.3f}  (n={len(v)})")
        for call, floor in (
            ("latestOffset", "floor: a no-op source's look"),
            ("append_many", "floor: write + fsync"),
        ):
            ratio = statistics.median(res[call + " ms"]) / statistics.median(res[floor + " ms"])
            print(f"  {call} / its floor: {ratio:.2f}")
    if "peer" in got:
        a, b = got["this tree"], got["peer"]
        print("this tree / peer (medians):")
        for k in a:
            if k.endswith("ms") and not k.startswith("floor") and k in b:
                print(f"  {k:38s} {statistics.median(a[k]) / statistics.median(b[k]):.2f}")


if __name__ == "__main__":
    main()
