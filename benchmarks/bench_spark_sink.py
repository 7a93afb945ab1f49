"""Spark sink throughput: seglog vs the Python Arrow writer API's own ceiling vs parquet.

    python benchmarks/bench_spark_sink.py [--rows 1200000] [--per-batch 200000]

One Spark session, one input (a seglog topic read by the seglog source, identical for all
three sinks), three streaming queries with ``Trigger.AvailableNow``:

- ``seglog``: the exactly-once sink (route, encode, stage, fsync; the driver publishes);
- ``noop``: a Python ``DataSourceStreamArrowWriter`` that only counts the Arrow batches it
  is handed: the ceiling of any Python Arrow sink, source and API cost included;
- ``parquet``: Spark's built-in file stream sink.

Steady state excludes start-up: rows/s is computed from the query progress of every
micro-batch but the first; the sinks run interleaved ``--repeats`` times and the best run
of each counts (the machine is shared, interference only ever slows a run down). Then,
without Spark (``--commit-times-only`` runs just this), the driver's commit time per
micro-batch is measured with the topic at 10 and at 1,000 segments in the same run (it
must not grow with the data already there), next to the first commit after another
writer, which opens the log dirs afresh (what every commit cost before commits resumed
the process's paused writer).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import pyarrow as pa  # noqa: E402

VALUE_BYTES = 100


def fill_input(logs: Path, rows: int) -> None:
    from seglog.logstore.manager.log_manager import LogManager
    from seglog.logstore.records.record_codec import encode_batches

    per_part = rows // 3
    chunk = 50_000
    with LogManager([logs]) as mgr:
        mgr.create_topic("in", 3)
        for p in range(3):
            for lo in range(0, per_part, chunk):
                n = min(chunk, per_part - lo)
                ids = range(p * per_part + lo, p * per_part + lo + n)
                values = pa.array([(b"%012d" % i).ljust(VALUE_BYTES, b"x") for i in ids])
                keys = pa.array([b"user-%d" % (i % 1000) for i in ids])
                mgr.append("in", p, encode_batches(values, keys))
        mgr.checkpoint_high_watermarks()


def noop_source():
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )

    class Count(WriterCommitMessage):
        def __init__(self, n: int) -> None:
            self.n = n

    class NoopWriter(DataSourceStreamArrowWriter):
        def write(self, iterator):
            return Count(sum(b.num_rows for b in iterator))

        def commit(self, messages, batchId):  # noqa: N803
            pass

        def abort(self, messages, batchId):  # noqa: N803
            pass

    class Noop(DataSource):
        @classmethod
        def name(cls):
            return "noop_arrow"

        def streamWriter(self, schema, overwrite):  # noqa: N802
            return NoopWriter()

    return Noop


def run_query(spark, logs: str, sink: str, out: Path, per_batch: int) -> tuple[float, int]:
    out.mkdir(parents=True, exist_ok=True)
    """(steady-state rows/s, batches) of one AvailableNow query into ``sink``."""
    df = (spark.readStream.format("seglog").option("path", logs).option("subscribe", "in")
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(per_batch)).load()
          .select("key", "value"))
    w = df.writeStream.option("checkpointLocation", str(out / f"chk-{sink}"))
    if sink == "seglog":
        w = w.format("seglog").option("path", str(out / "sink-logs")).option("topic", "out") \
            .option("numPartitions", "3")
    elif sink == "noop":
        w = w.format("noop_arrow")
    else:
        w = w.format("parquet").option("path", str(out / "parquet"))
    q = w.trigger(availableNow=True).start()
    q.awaitTermination()
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    if sink == "seglog":  # a sink that skips rows would look fast: count what it wrote
        from seglog.logstore.manager.log_manager import LogManager

        with LogManager([out / "sink-logs"], read_only=True) as mgr:
            written = sum(mgr.high_watermarks().values())
        read = sum(p["numInputRows"] for p in progress)
        if written != read:
            raise SystemExit(f"the seglog sink holds {written:,} rows of the {read:,} read")
    steady = progress[1:] or progress
    rows = sum(p["numInputRows"] for p in steady)
    secs = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
    return rows / secs, len(progress)


def commit_times(work: Path, rows_per_batch: int, segment_counts: tuple[int, ...] = (10, 1000),
                 commits: int = 10) -> list[tuple[int, float, list[float]]]:
    """Driver commit seconds per micro-batch (2 tasks of ``rows_per_batch`` rows, 1 MiB
    segments) with the topic first filled to each of ``segment_counts`` segments (1 MB
    appends by another writer). Per count: (segments before, the first commit after that
    writer, which opens the log dirs afresh; the next ``commits``, which resume the
    process's paused writer)."""
    from seglog.logstore.manager.log_manager import LogManager
    from seglog.logstore.records.record_codec import encode_batches
    from seglog.streaming.sink_commit import commit
    from seglog.streaming.sink_local_staging import stage_rows
    from seglog.streaming.sink_options import SinkColumns, SinkOptions

    logs = work / "commit-logs"
    opts = SinkOptions.parse({"path": str(logs), "topic": "t", "numPartitions": "3",
                              "topic.segment.bytes": str(1 << 20)})
    data = pa.record_batch({
        "key": pa.array([b"user-%d" % (i % 1000) for i in range(rows_per_batch)]),
        "value": pa.array([b"v" * VALUE_BYTES] * rows_per_batch)})
    cols = SinkColumns.resolve(data.schema, default_topic="t")
    batch_id = 0

    def one() -> float:
        nonlocal batch_id
        staged = [stage_rows(opts, cols, [data], "bench", batch_id, t, 0) for t in range(2)]
        t0 = time.perf_counter()
        commit(staged, batch_id, opts)
        batch_id += 1
        return time.perf_counter() - t0

    def segments() -> int:
        return len(list(logs.glob("t-*/*.log")))

    one()  # creates the topic
    filler = encode_batches(pa.array([b"f" * 1000] * 1000))  # 1 MB: one segment each
    out = []
    for count in segment_counts:
        with LogManager([logs]) as mgr:
            for i in range(max(count - segments(), 0)):
                mgr.append("t", i % 3, filler)
        before = segments()
        fresh = one()
        out.append((before, fresh, [one() for _ in range(commits)]))
    return out


def report_commit_times(work: Path) -> None:
    runs = commit_times(work, 20_000)
    for segments, fresh, times in runs:
        print(f"driver commit per micro-batch (40k rows, Spark-free, 1 MiB segments) at "
              f"{segments} segments: {statistics.median(times) * 1000:.1f} ms median of "
              f"{len(times)} (min {min(times) * 1000:.1f}); the first after another writer "
              f"(a fresh open): {fresh * 1000:.1f} ms")
    first, last = (statistics.median(t) for _, _, t in (runs[0], runs[-1]))
    print(f"  at {runs[-1][0]} / at {runs[0][0]} segments: {last / first:.2f} (must not grow)")


def main() -> None:
    parser = argparse.ArgumentParser(description="seglog Spark sink benchmark")
    parser.add_argument("--rows", type=int, default=1_200_000)
    parser.add_argument("--per-batch", type=int, default=200_000)
    parser.add_argument("--commit-times-only", action="store_true",
                        help="only the Spark-free driver commit times")
    parser.add_argument("--repeats", type=int, default=2,
                        help="interleaved runs per sink; the best counts (noisy machines)")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    from seglog.datasource import SeglogDataSource

    work = Path(tempfile.mkdtemp(prefix="seglog-bench-sink-"))
    if args.commit_times_only:
        try:
            report_commit_times(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    try:
        logs = work / "in-logs"
        fill_input(logs, args.rows)
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(SeglogDataSource)
        spark.dataSource.register(noop_source())
        results: dict[str, tuple[float, int]] = {}
        # warm-up: Python workers, numba caches, JIT of the JVM side
        run_query(spark, str(logs), "noop", work / "warm", args.per_batch)
        for r in range(args.repeats):
            for sink in ("noop", "seglog", "parquet"):
                rate, batches = run_query(spark, str(logs), sink, work / f"run{r}",
                                          args.per_batch)
                print(f"  run {r} {sink:>8}: {rate:>12,.0f} rows/s", flush=True)
                if rate > results.get(sink, (0.0, 0))[0]:
                    results[sink] = (rate, batches)
        spark.stop()
        for sink in ("noop", "seglog", "parquet"):
            print(f"{sink:>8}: {results[sink][0]:>12,.0f} rows/s steady state, best of "
                  f"{args.repeats} ({results[sink][1]} micro-batches of <= "
                  f"{args.per_batch:,} rows, {VALUE_BYTES}-byte values)")
        seg, noop, parquet = (results[s][0] for s in ("seglog", "noop", "parquet"))
        print(f"seglog / no-op Python Arrow writer (API ceiling): {seg / noop:.2f} "
              f"(goal >= 0.80)")
        print(f"seglog / Spark parquet file sink:                 {seg / parquet:.2f}")

        report_commit_times(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
