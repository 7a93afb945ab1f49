"""First read and first write of a new Spark application: seglog vs a no-op Python source.

    python benchmarks/bench_first_use.py [--repeats 3] [--profile] [--cold-cache]

Every case runs in a fresh process, so a fresh Spark application with fresh Python
workers, exactly what a user's first query pays. The clock starts after the
SparkSession exists (JVM start-up is the same for every case) and stops when the first
action returns. Spark's Python data source lookup (a Python process importing every
``pyspark_*`` module, run once per application by the first ``spark.dataSource`` call or
the first Python data source resolved) runs before the clock in every case, by
registering the no-op source: seglog's share of it is importing ``pyspark_seglog``
(``--profile``: ``lookup``). The actions:

- ``read``: ``spark.read.format(X)....load().collect()`` of 1,000 rows;
- ``write``: ``spark.range(1000)....write.format(X).mode("append").save()``.

The peers, measured in the same run: a no-op Python data source (the same API, reading
1,000 rows built in Python / writing nothing: the floor of any Python data source) and
Spark's parquet. The ratio that matters is seglog / no-op (goal <= 1.2). The cases run
interleaved and the best of ``--repeats`` counts (interference only slows a run down).

``--profile`` also replays, outside Spark, each Python process Spark starts for these two
actions (``ROLES``): per process, the seconds Spark's own module takes to import, the
seconds seglog adds there, and which heavy libraries seglog makes it load
(``--repeats 0 --profile``: only that).

``--cold-cache`` adds, in the same run, a seglog read and write each given an empty numba
cache of its own (``NUMBA_CACHE_DIR``, inherited by the driver and every Python worker
Spark starts): a fresh install's first application when ``python -m seglog.warmup`` was
not run (the kernels compile in it, started early by the query's planning: see
``seglog.logstore.records.kernel_cache``). The seglog rows without it use the cache as installed
(run ``python -m seglog.warmup`` first).
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
COLD_CASES = ("seglog-read-cold", "seglog-write-cold")


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

    from seglog.logstore.manager.log_manager import LogManager
    from seglog.logstore.records.record_codec import encode_batches

    values = pa.array([b"v%d" % i for i in range(ROWS)])
    with LogManager([work / "logs"]) as mgr:
        mgr.create_topic("events", 1)
        mgr.append("events", 0, encode_batches(values))
        mgr.checkpoint_high_watermarks()
    pq.write_table(pa.table({"value": values}), work / "parquet-in.parquet")


def run_case(case: str, work: Path) -> float:
    spark = _session()
    fmt, what = case.split("-")[:2]
    # Every case, before the clock: the first register call runs Spark's Python data
    # source lookup (a Python process importing every ``pyspark_*`` module), which would
    # otherwise fall inside seglog's clock (found by that lookup) and not the no-op's.
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


# The Python processes Spark 4.3 starts for a first read and a first write, in order: the
# module it runs (``python -m pyspark.daemon <module>``, each a fresh process) and the
# seglog calls made there. ``--profile`` replays each in a fresh interpreter, outside Spark,
# handing the pickled objects from one to the next as Spark does.
ROLES = (
    ("lookup", "pyspark.sql.worker.lookup_data_sources", "import pyspark_seglog"),
    ("schema", "pyspark.sql.worker.create_data_source", "DataSource.schema()"),
    ("plan-read", "pyspark.sql.worker.plan_data_source_read", "reader(), partitions()"),
    ("read", "pyspark.worker", "unpickle reader, read() all rows"),
    ("plan-write", "pyspark.sql.worker.write_into_data_source", "writer()"),
    ("write", "pyspark.worker", "unpickle writer, write() 1,000 rows"),
    ("commit", "pyspark.sql.worker.commit_data_source_write", "unpickle writer, commit()"),
)
HEAVY = ("numba", "pyarrow", "pyarrow.compute", "numpy", "pandas")


def run_role(role: str, work: Path) -> dict:
    """One Spark Python process's seglog work in this (fresh) interpreter."""
    import importlib

    spark_module = dict((r, m) for r, m, _ in ROLES)[role]
    t0 = time.perf_counter()
    importlib.import_module(spark_module)
    if spark_module == "pyspark.worker":
        # A task's worker loads these for any Python data source (the no-op's too).
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
    from pyspark.serializers import CloudPickleSerializer

    ser = CloudPickleSerializer()
    before = set(sys.modules)
    t1 = time.perf_counter()
    state = work / "roles"
    options = {"path": str(work / "logs")}
    options.update({"topic": "out"} if role.endswith("write") else {"subscribe": "events"})
    if role == "lookup":
        import pyspark_seglog  # noqa: F401
    elif role in ("schema", "plan-read", "plan-write"):
        from pyspark_seglog import DefaultSource

        ds = DefaultSource(options)
        if role == "schema":
            (state / "schema").write_bytes(ser.dumps(ds.schema()))
        elif role == "plan-read":
            reader = ds.reader(ser.loads((state / "schema").read_bytes()))
            parts = reader.partitions()
            (state / "read").write_bytes(ser.dumps((reader, parts)))
        else:
            from pyspark.sql.types import StringType, StructField, StructType

            schema = StructType([StructField("value", StringType())])
            (state / "writer").write_bytes(ser.dumps(ds.writer(schema, False)))
    elif role == "read":
        reader, parts = ser.loads((state / "read").read_bytes())
        assert sum(b.num_rows for p in parts for b in reader.read(p)) == ROWS
    elif role == "write":
        import pyarrow as pa
        from pyspark.taskcontext import TaskContext

        ctx = TaskContext._getOrCreate()
        ctx._partitionId, ctx._attemptNumber = 0, 0
        writer = ser.loads((state / "writer").read_bytes())
        rows = pa.record_batch({"value": pa.array([str(i) for i in range(ROWS)])})
        (state / "message").write_bytes(ser.dumps(writer.write(iter([rows]))))
    else:
        writer = ser.loads((state / "writer").read_bytes())
        writer.commit([ser.loads((state / "message").read_bytes())])
    t2 = time.perf_counter()
    new = set(sys.modules) - before
    return {"spark": t1 - t0, "seglog": t2 - t1,
            "loads": [m for m in HEAVY if m in new]}


def profile(work: Path) -> None:
    """Where each Spark Python process's seglog time goes, outside Spark."""
    (work / "roles").mkdir(exist_ok=True)
    print("seglog's share of each Python process Spark starts (fresh interpreters, "
          "outside Spark):")
    print(f"  {'process (module Spark runs)':48s}{'Spark s':>8s}{'seglog s':>9s}  "
          "seglog loads / does")
    for role, module, does in ROLES:
        out = subprocess.run([sys.executable, __file__, "--role", role, "--work", str(work)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.stderr.write(out.stderr[-3000:])
            raise SystemExit(f"role {role} failed")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        loads = ", ".join(r["loads"]) or "-"
        print(f"  {role + ' (' + module.rsplit('.', 1)[-1] + ')':48s}{r['spark']:8.2f}"
              f"{r['seglog']:9.2f}  {loads}; {does}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--cold-cache", action="store_true",
                        help="also a seglog read and write each with an empty numba cache "
                             "(NUMBA_CACHE_DIR): a fresh install's first application "
                             "without python -m seglog.warmup")
    parser.add_argument("--case", choices=CASES + COLD_CASES, help=argparse.SUPPRESS)
    parser.add_argument("--role", choices=[r for r, _, _ in ROLES], help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if args.case:  # a child: one case in a fresh application
        print(json.dumps({"seconds": run_case(args.case, Path(args.work))}))
        return 0
    if args.role:
        print(json.dumps(run_role(args.role, Path(args.work))))
        return 0
    with tempfile.TemporaryDirectory(prefix="seglog-first-use-") as tmp:
        work = Path(tmp)
        _prepare(work)
        if args.repeats:
            report(bench(work, args.repeats, args.cold_cache), args.repeats, args.cold_cache)
        if args.profile:
            profile(work)
    return 0


def bench(work: Path, repeats: int, cold_cache: bool = False) -> dict[str, float]:
    best: dict[str, float] = {}
    cases = CASES + (COLD_CASES if cold_cache else ())
    for i in range(repeats):
        for case in cases:
            env = dict(os.environ)
            if case.endswith("-cold"):
                env["NUMBA_CACHE_DIR"] = str(work / f"numba-cache-{case}-{i}")
            out = subprocess.run([sys.executable, __file__, "--case", case, "--work", str(work)],
                                 capture_output=True, text=True, env=env)
            if out.returncode != 0:
                sys.stderr.write(out.stderr[-3000:])
                raise SystemExit(f"case {case} failed")
            seconds = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
            best[case] = min(seconds, best.get(case, float("inf")))
    return best


def report(best: dict[str, float], repeats: int, cold_cache: bool = False) -> None:
    print(f"first action of a new application, best of {repeats} (seconds); "
          "cold: seglog with an empty numba cache")
    print(f"{'':12s}{'no-op':>8s}{'seglog':>8s}{'parquet':>9s}{'seglog/no-op':>14s}"
          f"{'seglog/parquet':>16s}")
    for what in ("read", "write"):
        noop, par = best[f"noop-{what}"], best[f"parquet-{what}"]
        for label, case in ((what, f"seglog-{what}"), (f"{what} cold", f"seglog-{what}-cold")):
            if case in best:
                seg = best[case]
                print(f"{label:12s}{noop:8.2f}{seg:8.2f}{par:9.2f}{seg / noop:14.2f}"
                      f"{seg / par:16.2f}")


if __name__ == "__main__":
    sys.exit(main())
