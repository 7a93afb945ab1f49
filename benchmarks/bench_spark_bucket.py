"""Spark on a bucket: sink and source rows/s against the no-op Python Arrow ceilings and
against seglog on a local dir, and the driver's commit time per micro-batch.

    python benchmarks/bench_spark_bucket.py [--rows 600000] [--per-batch 150000]
                                            [--commit-mb 1,100] [--history 200]

The bucket is moto's S3 server on 127.0.0.1 (``tests/s3_server.py``), started before the
session so every Python worker inherits its ``AWS_*`` environment. moto is a Python
server, far slower than S3 or MinIO: the bucket's rows/s here are a floor.

1. Sink: one input (a local seglog topic read by the seglog source), three AvailableNow
   queries: the no-op Python Arrow writer, seglog on a local dir, seglog on the bucket.
2. Source: the same data in a local dir and in the bucket, read by the seglog source into
   Spark's ``noop`` sink, against the no-op Python Arrow reader (``bench_spark_source``).
3. Driver commit per micro-batch, Spark-free: tasks' fragments of 1 MB and 100 MB (and
   1 GB with ``--commit-mb 1,100,1000``) are uploaded first; only ``commit()`` is timed.
   Then again after ``--history`` more commits (a long history: snapshots every 10).
Steady-state rates exclude each query's first micro-batch; runs alternate and the best
of ``--repeats`` counts (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
sys.path.insert(0, str(_HERE.parent / "tests"))
# The no-op data sources live in the peer benchmarks: Spark's workers import them too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(_HERE), os.environ.get("PYTHONPATH", "")) if p)

import pyarrow as pa  # noqa: E402
from bench_spark_sink import fill_input, noop_source  # noqa: E402
from bench_spark_source import NoopDataSource, run, write_seglog  # noqa: E402
from s3_server import MotoServer  # noqa: E402

VALUE_BYTES = 100


def sink_rate(spark, source: str, target: str, out: Path, per_batch: int) -> float:
    df = (spark.readStream.format("seglog").option("path", source).option("subscribe", "in")
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(per_batch)).load().select("key", "value"))
    w = df.writeStream.option("checkpointLocation", str(out / f"chk-{time.time_ns()}"))
    if target == "noop":
        w = w.format("noop_arrow")
    else:
        w = w.format("seglog").option("path", target).option("topic", f"out{time.time_ns()}") \
            .option("numPartitions", "3")
    q = w.trigger(availableNow=True).start()
    q.awaitTermination()
    progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
    steady = progress[1:] or progress
    return (sum(p["numInputRows"] for p in steady)
            / (sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000))


def commit_times(uri: str, sizes_mb: list[int], history: int) -> list[tuple[str, float]]:
    """(label, median seconds) of the driver's commit for each micro-batch size, early
    and after ``history`` more commits."""
    from seglog.streaming.sink_bucket_commit import commit
    from seglog.streaming.sink_bucket_staging import stage_rows
    from seglog.streaming.sink_options import SinkColumns, SinkOptions

    opts = SinkOptions.parse({"path": uri, "topic": "c", "numPartitions": "3"})
    rows = 10_000
    data = pa.record_batch({"key": pa.array([b"user-%d" % (i % 1000) for i in range(rows)]),
                            "value": pa.array([b"v" * VALUE_BYTES] * rows)})
    cols = SinkColumns.resolve(data.schema, default_topic="c")
    per_mb = max(1, round((1 << 20) / (rows * (VALUE_BYTES + 20))))
    batch = [0]

    def one(mb: int, tasks: int = 2) -> float:
        reps = max(1, mb * per_mb // tasks)
        staged = [stage_rows(opts, cols, [data] * reps, "bench", batch[0], t, 0)
                  for t in range(tasks)]
        t0 = time.perf_counter()
        commit(staged, batch[0], opts)
        batch[0] += 1
        return time.perf_counter() - t0

    out = []
    for mb in sizes_mb:
        out.append((f"{mb} MB", statistics.median(one(mb) for _ in range(3))))
    for _ in range(history):
        one(0)
    out.append((f"1 MB after {history} more commits",
                statistics.median(one(1) for _ in range(3))))
    return out


def print_rates(title: str, best: dict[str, float], ceiling: str) -> None:
    """Each rate of ``best``, then the bucket's against the no-op ``ceiling`` and against
    the local log dir (measured in the same run)."""
    print(title)
    for label, rate in best.items():
        print(f"  {label:28s} {rate:12,.0f}")
    print(f"  bucket / no-op ceiling {best['seglog bucket'] / best[ceiling]:.2f} (goal >= "
          f"0.8), bucket / local dir {best['seglog bucket'] / best['seglog local dir']:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=600_000)
    ap.add_argument("--per-batch", type=int, default=150_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--commit-mb", default="1,100")
    ap.add_argument("--history", type=int, default=200)
    args = ap.parse_args()

    from pyspark.sql import SparkSession

    from seglog.datasource import SeglogDataSource

    with MotoServer() as server, tempfile.TemporaryDirectory() as tmp:
        os.environ.update(server.env)
        uri = f"s3://{server.create_bucket('bench')}/logs"
        work = Path(tmp)
        local_in = work / "in-logs"
        fill_input(local_in, args.rows)
        write_seglog(str(work / "src-logs"), args.rows)
        write_seglog(uri, args.rows)
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "2g")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(SeglogDataSource)
        spark.dataSource.register(noop_source())
        spark.dataSource.register(NoopDataSource)
        sinks = {"no-op Python Arrow writer": "noop", "seglog local dir": str(work / "out"),
                 "seglog bucket": uri}
        readers = {
            "no-op Python Arrow reader": lambda: spark.readStream.format("noop_arrow_bench")
            .option("rows", str(args.rows)).option("perTrigger", str(args.per_batch)),
            "seglog local dir": lambda: spark.readStream.format("seglog")
            .option("path", str(work / "src-logs")).option("subscribe", "bench")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(args.per_batch)),
            "seglog bucket": lambda: spark.readStream.format("seglog").option("path", uri)
            .option("subscribe", "bench").option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(args.per_batch)),
        }
        sink_rate(spark, str(local_in), "noop", work, args.per_batch)  # warm-up
        best_sink: dict[str, float] = {}
        best_source: dict[str, float] = {}
        for r in range(args.repeats):
            for label, target in sinks.items():
                rate = sink_rate(spark, str(local_in), target, work, args.per_batch)
                best_sink[label] = max(rate, best_sink.get(label, 0.0))
            for label, make in readers.items():
                rate = run(spark, make(), str(work / f"chk-src-{r}-{label[:8]}"))[0]
                best_source[label] = max(rate, best_source.get(label, 0.0))
        spark.stop()
        print_rates(f"sink, steady-state rows/s ({args.per_batch:,} rows per micro-batch, "
                    f"best of {args.repeats}):", best_sink, "no-op Python Arrow writer")
        print_rates("source, steady-state rows/s:", best_source, "no-op Python Arrow reader")
        sizes = [int(s) for s in args.commit_mb.split(",") if s]
        print("driver commit per micro-batch on the bucket (median of 3, uploads excluded):")
        for label, secs in commit_times(uri, sizes, args.history):
            print(f"  {label:32s} {secs * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
