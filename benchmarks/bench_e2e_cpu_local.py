"""CPU of each step of a seglog -> seglog micro-batch on local log dirs (issue 25, goal
4), Spark-free: what ``bench_e2e_latency.py``'s local case spends in seglog's Python,
apart from Spark's own per-trigger work.

Run: ``python benchmarks/bench_e2e_cpu_local.py [--batches 60] [--appends 3]
[--profile STEP]``

Two log dirs (``in``, ``out``) in a temporary directory. Per micro-batch, one step
after the other, each through the call the Spark source or sink makes: the producer's
``append_many`` of one record, ``--appends`` times; the source's ``latestOffset`` and
``partitions`` (``SeglogStreamReader``, read-only shared reader); the input partitions
pickled and unpickled (as Spark ships them to a task); the read task
(``read_input_partition``); the sink's task (``sink_local_staging.stage_rows``) and the
driver's commit (``sink_commit.commit``, which fsyncs: its CPU is the syscalls' and the
Python around them; the wait for the disk is not CPU). Printed per step: the median and
p90 of ``time.process_time`` over the micro-batches after the first two (the opens), in
ms. ``--profile STEP``: cProfile of that step over the measured micro-batches, by
cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pickle
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable

from seglog.datasource.schema import source_schema
from seglog.datasource.stream_reader import SeglogStreamReader, read_input_partition
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.streaming.sink_commit import commit
from seglog.streaming.sink_local_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions

STEPS = ("publish", "latestOffset", "partitions", "ship", "read task", "sink task", "commit")
SKIP = 2
T = TypeVar("T")


def _publish(producer: LogManager, appends: int) -> None:
    for _ in range(appends):
        producer.append_many({("in", 0): encode_batches(pa.array([b"%d" % time.time_ns()]))})


def _ship(parts: list[InputPartition]) -> list[InputPartition]:
    """As Spark hands them to a task: pickled."""
    shipped: list[InputPartition] = pickle.loads(pickle.dumps(parts))
    return shipped


def _read(parts: list[InputPartition]) -> list[pa.RecordBatch]:
    return [b for p in parts for b in read_input_partition(p)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--appends", type=int, default=3)
    parser.add_argument("--profile", choices=STEPS)
    args = parser.parse_args()
    cpu_ms: dict[str, list[float]] = {s: [] for s in STEPS}
    profile = cProfile.Profile()
    with tempfile.TemporaryDirectory(prefix="seglog-e2e-cpu-") as root:
        in_dir, out_dir = f"{root}/in", f"{root}/out"
        for log_dir, topic in ((in_dir, "in"), (out_dir, "out")):
            with LogManager(log_dir) as mgr:
                mgr.create_topic(topic, 1, {"retention.ms": -1})
        source_opts = {"path": in_dir, "subscribe": "in"}
        source = SeglogStreamReader(source_opts, source_schema(source_opts))
        sink = SinkOptions.parse({"path": out_dir, "topic": "out"})
        offsets = source.initialOffset()
        with LogManager(in_dir) as producer:
            for batch in range(args.batches):

                def step(name: str, call: Callable[[], T], batch: int = batch) -> T:
                    measured = batch >= SKIP
                    if measured and name == args.profile:
                        profile.enable()
                    c0 = time.process_time()
                    result = call()
                    took = (time.process_time() - c0) * 1000
                    if measured and name == args.profile:
                        profile.disable()
                    if measured:
                        cpu_ms[name].append(took)
                    return result

                step("publish", partial(_publish, producer, args.appends))
                end = step(
                    "latestOffset", partial(source.latestOffset, offsets, ReadAllAvailable())
                )
                parts = step("partitions", partial(source.partitions, offsets, end))
                shipped = step("ship", partial(_ship, parts))
                read = step("read task", partial(_read, shipped))
                rows = pa.Table.from_batches(read).combine_chunks().to_batches()[0]
                assert rows.num_rows == args.appends, rows
                columns = SinkColumns.resolve(rows.schema, default_topic="out")
                staged = step(
                    "sink task", partial(stage_rows, sink, columns, [rows], "e2e-cpu", batch, 0, 0)
                )
                step("commit", partial(commit, [staged], batch, sink))
                offsets = end
    print(
        f"local log dirs; {args.batches - SKIP} micro-batches of {args.appends} appends; "
        "CPU ms (time.process_time)"
    )
    print(f"  {'step':>14}  median     p90")
    for name in STEPS:
        values = cpu_ms[name]
        p90 = statistics.quantiles(values, n=10, method="inclusive")[-1]
        print(f"  {name:>14}  {statistics.median(values):6.2f}  {p90:6.2f}")
    if args.profile:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(40)
        print(out.getvalue())


if __name__ == "__main__":
    main()
