"""First read and first write of a new Spark application: seglog vs a no-op Python source.

    python benchmarks/bench_first_use.py [--repeats 3] [--profile]

Every case runs in a fresh process, so a fresh Spark application with fresh Python
workers, exactly what a user's first query pays. The clock starts after the
SparkSession exists (JVM start-up is the same for every case) and stops when the first
action returns:

- ``read``: ``spark.read.format(X)....load().collect()`` of 1,000 rows;
- ``write``: ``spark.range(1000)....write.format(X).mode("append").save()``.

The peers, measured in the same run: a no-op Python data source (the same API, reading
1,000 rows built in Python / writing nothing: the floor of any Python data source) and
Spark's parquet. The ratio that matters is seglog / no-op (goal <= 1.2). The cases run
interleaved and the best of ``--repeats`` counts (interference only slows a run down).

``--profile`` also prints where seglog's Python-side time goes: the import time of the
modules a worker loads, and the first call of the codec (compiled-kernel loading).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS = 1000
CASES = ("noop-read", "seglog-read", "parquet-read", "noop-write", "seglog-write",
         "parquet-write")


def _session():
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2]").appName("first-use")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate())


def _noop_source():
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        InputPartition,
        WriterCommitMessage,
    )

    class Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(0)]

        def read(self, partition):
            import pyarrow as pa

            n = ROWS
            yield pa.record_batch({
                "key": pa.array([None] * n, pa.binary()),
                "value": pa.array([b"v%d" % i for i in range(n)], pa.binary()),
                "offset": pa.array(range(n), pa.int64()),
            })

    class Writer(DataSourceArrowWriter):
        def write(self, iterator):
            sum(b.num_rows for b in iterator)
            return WriterCommitMessage()

    class Noop(DataSource):
        @classmethod
        def name(cls):
            return "noopbench"

        def schema(self):
            return "key binary, value binary, offset bigint"

        def reader(self, schema):
            return Reader()

        def writer(self, schema, overwrite):
            return Writer()

    return Noop


def _prepare(work: Path) -> None:
    """A seglog topic and a parquet dir of ROWS rows each, written outside Spark."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from seglog.logstore.log_manager import LogManager
    from seglog.logstore.record_codec import encode_batches

    values = pa.array([b"v%d" % i for i in range(ROWS)])
    with LogManager([work / "logs"]) as mgr:
        mgr.create_topic("events", 1)
        mgr.append("events", 0, encode_batches(values))
        mgr.checkpoint_high_watermarks()
    pq.write_table(pa.table({"value": values}), work / "parquet-in.parquet")


def run_case(case: str, work: Path) -> float:
    spark = _session()
    fmt, what = case.split("-")
    if fmt == "noop":
        spark.dataSource.register(_noop_source())
    start = time.perf_counter()
    if what == "read":
        if fmt == "seglog":
            df = (spark.read.format("seglog").option("path", str(work / "logs"))
                  .option("subscribe", "events").load())
        elif fmt == "noop":
            df = spark.read.format("noopbench").load()
        else:
            df = spark.read.parquet(str(work / "parquet-in.parquet"))
        assert len(df.collect()) == ROWS
    else:
        df = spark.range(ROWS).selectExpr("CAST(id AS STRING) AS value")
        if fmt == "seglog":
            (df.write.format("seglog").option("path", str(work / f"out-{os.getpid()}"))
             .option("topic", "out").mode("append").save())
        elif fmt == "noop":
            df.write.format("noopbench").mode("append").save()
        else:
            df.write.mode("append").parquet(str(work / f"parquet-out-{os.getpid()}"))
    elapsed = time.perf_counter() - start
    spark.stop()
    return elapsed


def profile() -> None:
    """Where a seglog worker's own start-up goes, without Spark."""
    code = ("import time; t=time.perf_counter(); import {m}; "
            "print(round(time.perf_counter()-t, 3))")
    for module in ("pyspark.sql.datasource", "pyarrow", "numba",
                   "seglog.datasource.data_source", "seglog.logstore.record_codec",
                   "seglog.datasource.batch_reader", "seglog.datasource.batch_writer"):
        out = subprocess.run([sys.executable, "-c", code.format(m=module)],
                             capture_output=True, text=True, check=True).stdout.strip()
        print(f"  import {module:40s} {out} s (fresh process)")
    first_call = (
        "import time, pyarrow as pa; "
        "from seglog.logstore.record_codec import encode_batches, decode_batches; "
        "t=time.perf_counter(); b=encode_batches(pa.array([b'x']*10)); "
        "decode_batches(b); print(round(time.perf_counter()-t, 3))")
    out = subprocess.run([sys.executable, "-c", first_call], capture_output=True, text=True,
                         check=True).stdout.strip()
    print(f"  first encode+decode (kernel loading)         {out} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if args.case:  # a child: one case in a fresh application
        print(json.dumps({"seconds": run_case(args.case, Path(args.work))}))
        return 0
    with tempfile.TemporaryDirectory(prefix="seglog-first-use-") as tmp:
        work = Path(tmp)
        _prepare(work)
        best: dict[str, float] = {}
        for _ in range(args.repeats):
            for case in CASES:
                out = subprocess.run(
                    [sys.executable, __file__, "--case", case, "--work", str(work)],
                    capture_output=True, text=True)
                if out.returncode != 0:
                    sys.stderr.write(out.stderr[-3000:])
                    raise SystemExit(f"case {case} failed")
                seconds = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
                best[case] = min(seconds, best.get(case, float("inf")))
    print(f"first action of a new application, best of {args.repeats} (seconds)")
    print(f"{'':8s}{'no-op':>8s}{'seglog':>8s}{'parquet':>9s}{'seglog/no-op':>14s}"
          f"{'seglog/parquet':>16s}")
    for what in ("read", "write"):
        noop, seg, par = (best[f"{f}-{what}"] for f in ("noop", "seglog", "parquet"))
        print(f"{what:8s}{noop:8.2f}{seg:8.2f}{par:9.2f}{seg / noop:14.2f}{seg / par:16.2f}")
    if args.profile:
        print("seglog's own start-up, outside Spark:")
        profile()
    return 0


if __name__ == "__main__":
    sys.exit(main())
